package seqsvr

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// testCA is a certificate authority made for a test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue is a certificate and key (PEM) signed by ca: a server's with dnsNames and 127.0.0.1,
// or a client's (no names).
func (ca *testCA) issue(t *testing.T, name string, server bool, dnsNames ...string) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), DNSNames: dnsNames,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
}

// writeFiles writes name → contents into a temp dir; returns the paths by name.
func writeFiles(t *testing.T, files map[string][]byte) map[string]string {
	dir := t.TempDir()
	out := map[string]string{}
	for name, data := range files {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		out[name] = p
	}
	return out
}

// Mutual TLS as the Rust SDK dials: the AllocSvr's certificate must chain to the CA and name
// alloc.<server_name>; the server requires the client's certificate. Another server name, a
// client certificate of another CA and a plaintext client are each refused.
func TestMutualTLSChecksTheAllocServerName(t *testing.T) {
	ca, other := newCA(t), newCA(t)
	serverCert, serverKey := ca.issue(t, "alloc-0-1", true, "alloc.seqsvr")
	clientCert, clientKey := ca.issue(t, "client", false)
	strangerCert, strangerKey := other.issue(t, "stranger", false)
	files := writeFiles(t, map[string][]byte{"ca.pem": ca.pem, "client.pem": clientCert, "client.key": clientKey,
		"stranger.pem": strangerCert, "stranger.key": strangerKey})
	pair, err := tls.X509KeyPair(serverCert, serverKey)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.pem)
	creds := credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{pair}, ClientCAs: pool,
		ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12})
	f := serveFake(t, &fakeAlloc{}, grpc.Creds(creds))
	f.setTable(table(0, 1, 0, 100, f.addr))

	connect := func(o Options) error {
		o.Seeds = []string{f.addr}
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		c, err := Connect(ctx, o)
		if err == nil {
			c.Close()
		}
		return err
	}
	good := &TLSFiles{ServerName: "seqsvr", CertFile: files["client.pem"], KeyFile: files["client.key"], CAFile: files["ca.pem"]}
	if err := connect(Options{TLS: good}); err != nil {
		t.Fatalf("the right identity and name: %v", err)
	}
	wrongName := *good
	wrongName.ServerName = "other"
	if err := connect(Options{TLS: &wrongName}); err == nil {
		t.Fatal("a server without alloc.other was accepted")
	}
	stranger := *good
	stranger.CertFile, stranger.KeyFile = files["stranger.pem"], files["stranger.key"]
	if err := connect(Options{TLS: &stranger}); err == nil {
		t.Fatal("a client certificate of another CA got an answer")
	}
	if err := connect(Options{Plaintext: true}); err == nil {
		t.Fatal("a plaintext client got an answer from a TLS server")
	}
	missing := *good
	missing.KeyFile = filepath.Join(t.TempDir(), "none.key")
	if err := connect(Options{TLS: &missing}); Code(err).String() != "InvalidArgument" {
		t.Fatalf("a key that is not there: %v", err)
	}
}

// The cluster file gives the seeds, the server name and the CA (relative to the file), and no
// TLS section means no TLS options (plaintext only when asked for).
func TestTheClusterFileGivesSeedsAndTLS(t *testing.T) {
	text := `section_size = 100000
[[sets]]
id = 0
uid_begin = 0
uid_end = 100
stores = [{ id = 1, addr = "127.0.0.1:7101" }]
allocs = ["a:1", "b:1"]
[[sets]]
id = 1
uid_begin = 100
uid_end = 200
stores = [{ id = 1, addr = "127.0.0.1:7111" }]
allocs = ["c:1", "a:1"]
[ids.schemes.orders]
scheme = "snowflake"
[ids.schemes.chats]
scheme = "rongcloud"
session_uid_begin = 0
session_uid_end = 200
[tls]
server_name = "seqsvr"
client_ca = "certs/client-bundle.pem"
store_ca = "certs/cluster-ca.pem"
peer_ca = "certs/cluster-ca.pem"
[tls.identities]
"alloc-0-1" = { role = "alloc", set = 0 }
"admin" = "admin"
`
	files := writeFiles(t, map[string][]byte{"cluster.toml": []byte(text), "plain.toml": []byte("[[sets]]\nid = 0\nallocs = [\"x:1\"]\n")})
	f, err := LoadClusterFile(files["cluster.toml"])
	if err != nil {
		t.Fatal(err)
	}
	opts, err := f.Options("c.pem", "c.key")
	if err != nil {
		t.Fatal(err)
	}
	if got := opts.Seeds; len(got) != 3 || got[0] != "a:1" || got[1] != "b:1" || got[2] != "c:1" {
		t.Fatalf("seeds %v", got)
	}
	wantCA := filepath.Join(filepath.Dir(files["cluster.toml"]), "certs/cluster-ca.pem")
	if opts.TLS.ServerName != "seqsvr" || opts.TLS.CAFile != wantCA || opts.Plaintext {
		t.Fatalf("%+v", opts.TLS)
	}
	if l, err := f.Layout("orders", 1_750_000_000_000); err != nil || l.Scheme() != Snowflake {
		t.Fatalf("%v %v", l, err)
	}
	if _, err := f.Layout("nope", 1_750_000_000_000); Code(err).String() != "NotFound" {
		t.Fatalf("%v", err)
	}
	// Sessions spread over [0, 200): key k goes to k × 200 / 2^26.
	c, _ := newClient(opts.withPlaintext())
	if uid, ok := c.sessionUID("chats", SessionKeys-1); !ok || uid != 199 {
		t.Fatalf("session uid %d %v", uid, ok)
	}
	if uid, _ := c.sessionUID("chats", 1<<25); uid != 100 {
		t.Fatalf("session uid %d", uid)
	}
	plain, err := LoadClusterFile(files["plain.toml"])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := plain.Options("c.pem", "c.key"); err == nil {
		t.Fatal("a file without [tls] gave TLS options")
	}
	if o := plain.PlaintextOptions(); !o.Plaintext || o.Seeds[0] != "x:1" {
		t.Fatalf("%+v", o)
	}
}

// withPlaintext is o dialling in plaintext (for tests that dial nothing).
func (o Options) withPlaintext() Options {
	o.TLS, o.Plaintext = nil, true
	return o
}
