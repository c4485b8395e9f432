package cluster_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gradiopool/gradiopool/internal/redistest"
	"github.com/gradiopool/gradiopool/pool"
	"github.com/gradiopool/gradiopool/pool/cluster"
)

// pki writes a private CA, a server certificate for 127.0.0.1 and a client
// certificate, all signed by the CA, as PEM files in dir.
type pki struct{ ca, serverCert, serverKey, clientCert, clientKey string }

func newPKI(t *testing.T, dir string) pki {
	t.Helper()
	key := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	now := time.Now()
	caKey := key()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	leaf := func(name string, serial int64, usage x509.ExtKeyUsage) (string, string) {
		k := key()
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
			ExtKeyUsage: []x509.ExtKeyUsage{usage}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kder, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return write(name+".crt", "CERTIFICATE", der), write(name+".key", "EC PRIVATE KEY", kder)
	}
	p := pki{ca: write("ca.crt", "CERTIFICATE", caDER)}
	p.serverCert, p.serverKey = leaf("server", 2, x509.ExtKeyUsageServerAuth)
	p.clientCert, p.clientKey = leaf("client", 3, x509.ExtKeyUsageClientAuth)
	return p
}

// TestTLS: rediss:// against a redis-server that requires TLS and client
// certificates: a private CA file and a client certificate work; without
// the client certificate, or without the CA, the start fails;
// InsecureSkipVerify accepts the server without the CA; TLS files on a
// redis:// URL are refused.
func TestTLS(t *testing.T) {
	p := newPKI(t, t.TempDir())
	tlsPort := redistest.FreePort(t)
	redistest.StartServer(t, "--tls-port", tlsPort, "--tls-cert-file", p.serverCert, "--tls-key-file", p.serverKey,
		"--tls-ca-cert-file", p.ca, "--tls-auth-clients", "yes")
	url := "rediss://127.0.0.1:" + tlsPort
	start := func(tf cluster.TLSFiles) error {
		rdb, _, err := cluster.NewClient(url+"?dial_timeout=1s", tf)
		if err != nil {
			return err
		}
		defer rdb.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c, err := cluster.New(ctx, cluster.Config{Client: rdb, Name: "tls", Limit: 1, Replicas: []string{replica}})
		if err != nil {
			return err
		}
		defer c.Close(context.Background())
		pm, err := c.Acquire(ctx, replica, pool.PriorityNormal)
		if err != nil {
			return err
		}
		pm.Release()
		return nil
	}
	if err := start(cluster.TLSFiles{CAFile: p.ca, CertFile: p.clientCert, KeyFile: p.clientKey}); err != nil {
		t.Errorf("CA file and client certificate: %v", err)
	}
	if err := start(cluster.TLSFiles{CAFile: p.ca}); err == nil {
		t.Error("started without the client certificate the server requires")
	}
	if err := start(cluster.TLSFiles{CertFile: p.clientCert, KeyFile: p.clientKey}); err == nil {
		t.Error("started trusting a server certificate of an unknown CA")
	}
	if err := start(cluster.TLSFiles{CertFile: p.clientCert, KeyFile: p.clientKey, InsecureSkipVerify: true}); err != nil {
		t.Errorf("InsecureSkipVerify with the client certificate: %v", err)
	}
	if _, _, err := cluster.NewClient("redis://127.0.0.1:"+tlsPort, cluster.TLSFiles{CAFile: p.ca}); err == nil {
		t.Error("TLS files accepted on a redis:// URL")
	}
	if _, _, err := cluster.NewClient(url, cluster.TLSFiles{CertFile: p.clientCert}); err == nil {
		t.Error("a client certificate without its key accepted")
	}
}
