// Package pki issues a private certificate authority and certificates signed by it: the
// one fixture the demo and the tests use for mutual TLS between node collectors and the
// gateway (a gateway's server certificate for loopback, one client certificate per
// node). Clusters get theirs from the Helm chart, cert-manager or the operator
// (docs/operating.md); nothing here is for production keys.
package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// CA is a certificate authority held in memory.
type CA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// PEM is the CA certificate, what a peer trusts (ca.crt).
	PEM []byte
}

// NewCA makes a self-signed CA named name, valid from an hour ago for validity.
func NewCA(name string, validity time.Duration) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := serialNumber()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: name},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(validity),
		IsCA: true, BasicConstraintsValid: true, MaxPathLenZero: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{cert: cert, key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

// Pool is a certificate pool that trusts only this CA.
func (ca *CA) Pool() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	return pool
}

// Leaf says what a certificate is for.
type Leaf struct {
	// CommonName is who it names: for a node's client certificate, the node's host.name.
	CommonName string
	DNSNames   []string
	IPs        []net.IP
	// Server and Client are the uses it may be put to (TLS server or client auth).
	Server, Client bool
	// NotBefore and NotAfter default to an hour ago and a day from now.
	NotBefore, NotAfter time.Time
}

// Loopback is a gateway's server certificate for listeners on this machine.
func Loopback(name string) Leaf {
	return Leaf{CommonName: name, DNSNames: []string{"localhost"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}, Server: true}
}

// NodeClient is a node collector's client certificate, naming the node.
func NodeClient(node string) Leaf { return Leaf{CommonName: node, Client: true} }

// Issue signs a certificate for leaf with a new key; both PEM-encoded.
func (ca *CA) Issue(leaf Leaf) (certPEM, keyPEM []byte, err error) {
	if !leaf.Server && !leaf.Client {
		return nil, nil, errors.New("pki: a certificate must be for server or client use, or both")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := serialNumber()
	if err != nil {
		return nil, nil, err
	}
	notBefore, notAfter := leaf.NotBefore, leaf.NotAfter
	if notBefore.IsZero() {
		notBefore = time.Now().Add(-time.Hour)
	}
	if notAfter.IsZero() {
		notAfter = time.Now().Add(24 * time.Hour)
	}
	var usage []x509.ExtKeyUsage
	if leaf.Server {
		usage = append(usage, x509.ExtKeyUsageServerAuth)
	}
	if leaf.Client {
		usage = append(usage, x509.ExtKeyUsageClientAuth)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: leaf.CommonName},
		NotBefore: notBefore, NotAfter: notAfter,
		DNSNames: leaf.DNSNames, IPAddresses: leaf.IPs,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: usage,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), nil
}

// Files are where one party's TLS material lies, as the collectors' configs name them
// (FATHOM_OTLP_TLS_CA, _CERT, _KEY).
type Files struct{ CA, Cert, Key string }

// Env is the collector environment that points a config at these files.
func (f Files) Env() []string {
	return []string{"FATHOM_OTLP_TLS_CA=" + f.CA, "FATHOM_OTLP_TLS_CERT=" + f.Cert, "FATHOM_OTLP_TLS_KEY=" + f.Key}
}

// WriteFiles issues a certificate for leaf and writes ca.crt, tls.crt and tls.key into
// dir (made if missing). Writing again over the same dir is a rotation: each file is
// replaced whole by a rename, as a kubelet updates a mounted secret, so a reader never
// sees half of one.
func (ca *CA) WriteFiles(dir string, leaf Leaf) (Files, error) {
	certPEM, keyPEM, err := ca.Issue(leaf)
	if err != nil {
		return Files{}, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return Files{}, err
	}
	f := Files{CA: filepath.Join(dir, "ca.crt"), Cert: filepath.Join(dir, "tls.crt"), Key: filepath.Join(dir, "tls.key")}
	for _, file := range []struct {
		path string
		data []byte
	}{{f.CA, ca.PEM}, {f.Key, keyPEM}, {f.Cert, certPEM}} {
		if err := replaceFile(file.path, file.data); err != nil {
			return Files{}, err
		}
	}
	return f, nil
}

func replaceFile(path string, data []byte) error {
	tmp := path + ".new"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("pki: replace %s: %w", path, err)
	}
	return nil
}

func serialNumber() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
}
