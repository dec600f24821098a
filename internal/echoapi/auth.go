package echoapi

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"strings"
)

// TokenSpec is one accepted bearer token, already read from its file or variable.
type TokenSpec struct {
	Name   string
	Secret string
	Scopes []string
	// RatePerSecond and Burst override the server's rate limit when positive.
	RatePerSecond float64
	Burst         int
}

// Principal is who a request is from.
type Principal struct {
	Name   string
	Scopes map[string]bool
}

type token struct {
	digest    [sha256.Size]byte
	principal Principal
	rate      float64
	burst     int
}

// Authenticator checks bearer tokens.
type Authenticator struct {
	tokens []token
}

// NewAuthenticator keeps only SHA-256 digests of the secrets, so comparisons are over
// equal-length values and the secrets do not linger in memory as strings.
func NewAuthenticator(specs []TokenSpec) (*Authenticator, error) {
	a := &Authenticator{}
	for _, s := range specs {
		if len(s.Secret) < 16 {
			return nil, fmt.Errorf("token %q is shorter than 16 characters; generate one with `openssl rand -hex 32`", s.Name)
		}
		p := Principal{Name: s.Name, Scopes: map[string]bool{}}
		for _, sc := range s.Scopes {
			p.Scopes[sc] = true
		}
		a.tokens = append(a.tokens, token{digest: sha256.Sum256([]byte(s.Secret)), principal: p, rate: s.RatePerSecond, burst: s.Burst})
	}
	return a, nil
}

// Verify reads an Authorization header. Every configured token is compared, in
// constant time, whatever matches first, so timing tells nothing about which or how
// much of a token was right.
func (a *Authenticator) Verify(header string) (*Principal, error) {
	secret, ok := strings.CutPrefix(header, "Bearer ")
	if !ok || secret == "" {
		return nil, ErrUnauthenticated
	}
	d := sha256.Sum256([]byte(strings.TrimSpace(secret)))
	var found *Principal
	for i := range a.tokens {
		if subtle.ConstantTimeCompare(d[:], a.tokens[i].digest[:]) == 1 && found == nil {
			found = &a.tokens[i].principal
		}
	}
	if found == nil {
		return nil, ErrUnauthenticated
	}
	return found, nil
}
