package collectortest

import (
	"crypto/x509"
	"path/filepath"
	"testing"
	"time"

	"github.com/fathom-gpu/fathom/internal/pki"
)

// TestCA is the tests' one certificate authority: every listener that requires TLS
// and every node's client certificate in a test is signed by the CA it makes.
func TestCA(t testing.TB) *pki.CA {
	t.Helper()
	ca, err := pki.NewCA("fathom-test-ca", 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// IssueFiles writes ca.crt, tls.crt and tls.key for leaf, signed by ca, into dir.
func IssueFiles(t testing.TB, ca *pki.CA, dir string, leaf pki.Leaf) pki.Files {
	t.Helper()
	f, err := ca.WriteFiles(dir, leaf)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// OTLPTLS is what a test's gateway and nodes need for mutual TLS: the gateway's server
// certificate for loopback and a client certificate for each named node, from one new
// CA, and the collector environment of each (FATHOM_OTLP_TLS_*).
type OTLPTLS struct {
	CA      *pki.CA
	Gateway pki.Files
	dir     string
}

// NewOTLPTLS makes the CA and the gateway's certificate.
func NewOTLPTLS(t testing.TB) *OTLPTLS {
	t.Helper()
	ca := TestCA(t)
	dir := t.TempDir()
	return &OTLPTLS{CA: ca, dir: dir, Gateway: IssueFiles(t, ca, filepath.Join(dir, "gateway"), pki.Loopback("fathom-gateway"))}
}

// Node issues (once per name) the client certificate of the node whose host.name is node.
func (o *OTLPTLS) Node(t testing.TB, node string) pki.Files {
	t.Helper()
	return IssueFiles(t, o.CA, filepath.Join(o.dir, "node-"+node), pki.NodeClient(node))
}

// LoopbackCert writes a certificate and key for 127.0.0.1 and localhost into dir,
// signed by a new test CA, for listeners that require TLS; the pool trusts it.
func LoopbackCert(t testing.TB, dir string) (certPath, keyPath string, pool *x509.CertPool) {
	t.Helper()
	ca := TestCA(t)
	f := IssueFiles(t, ca, dir, pki.Loopback("fathom-test"))
	return f.Cert, f.Key, ca.Pool()
}
