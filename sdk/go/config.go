package seqsvr

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"math/bits"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/BurntSushi/toml"
	"google.golang.org/grpc/codes"
)

// ClusterFile is what the SDK reads of a cluster config (config/cluster.toml's format, the file
// every server and seqctl read): the sets and their AllocSvrs (the seeds), the id schemes (for
// Decode and for routing rongcloud sessions) and the [tls] section (the server name and the CA
// the AllocSvrs' certificates chain to). Every other key is ignored.
type ClusterFile struct {
	// Path is the file read; relative paths in [tls] are relative to its directory.
	Path        string
	SectionSize uint64          `toml:"section_size"`
	Sets        []SetConfig     `toml:"sets"`
	IDs         IDsConfig       `toml:"ids"`
	TLS         *TLSFileSection `toml:"tls"`
}

// SetConfig is one `[[sets]]` table: a set's uid range and its AllocSvrs.
type SetConfig struct {
	ID       uint64   `toml:"id"`
	UIDBegin uint64   `toml:"uid_begin"`
	UIDEnd   uint64   `toml:"uid_end"`
	Allocs   []string `toml:"allocs"`
}

// IDsConfig is the `[ids]` table.
type IDsConfig struct {
	// MaxCount is the most ids one NextIDs call may ask for (0: the AllocSvrs' default).
	MaxCount uint32 `toml:"max_count"`
	// Schemes are the `[ids.schemes.NAME]` tables, by name.
	Schemes map[string]SchemeConfig `toml:"schemes"`
}

// SchemeConfig is one `[ids.schemes.NAME]` table.
type SchemeConfig struct {
	Scheme          string  `toml:"scheme"`
	EpochMs         *uint64 `toml:"epoch_ms"`
	Unit            string  `toml:"unit"`
	TimeBits        *uint32 `toml:"time_bits"`
	WorkerBits      *uint32 `toml:"worker_bits"`
	SeqBits         *uint32 `toml:"seq_bits"`
	SessionUIDBegin *uint64 `toml:"session_uid_begin"`
	SessionUIDEnd   *uint64 `toml:"session_uid_end"`
}

// Spec is the scheme's layout as written.
func (s SchemeConfig) Spec() LayoutSpec {
	return LayoutSpec{Scheme: Scheme(s.Scheme), EpochMs: s.EpochMs, Unit: TimeUnit(s.Unit),
		TimeBits: s.TimeBits, WorkerBits: s.WorkerBits, SeqBits: s.SeqBits}
}

// sessionUIDs is rongcloud's session uid range [begin, end) (default [0, 2^26)).
func (s SchemeConfig) sessionUIDs() (uint64, uint64) {
	begin, end := uint64(0), SessionKeys
	if s.SessionUIDBegin != nil {
		begin = *s.SessionUIDBegin
	}
	if s.SessionUIDEnd != nil {
		end = *s.SessionUIDEnd
	}
	return begin, end
}

// sessionUID is the uid whose section's owner issues session key's ids: keys scaled onto the
// range in order, begin + key × (end - begin) / 2^26 (the AllocSvrs' rule).
func sessionUID(begin, end, key uint64) uint64 {
	// key < 2^26 and the range < 2^64: the product fits 90 bits; divide in two steps.
	n := end - begin
	hi, lo := bits.Mul64(key, n)
	return begin + (hi<<(64-26) | lo>>26)
}

// TLSFileSection is the cluster file's `[tls]` table (the parts a client needs).
type TLSFileSection struct {
	// ServerName is the base of the servers' DNS names: AllocSvrs carry alloc.<ServerName>.
	ServerName string `toml:"server_name"`
	// StoreCA is the CA bundle the AllocSvrs' certificates chain to (AllocSvrs are store-plane
	// members: a client checks them against the store plane's bundle, never the client one).
	StoreCA  string `toml:"store_ca"`
	ClientCA string `toml:"client_ca"`
}

// LoadClusterFile reads a cluster config.
func LoadClusterFile(path string) (*ClusterFile, error) {
	var f ClusterFile
	if _, err := toml.DecodeFile(path, &f); err != nil {
		return nil, newError(codes.InvalidArgument, "give the cluster file every server reads (config/cluster.toml's format)",
			"cannot read the cluster file %s: %v", path, err)
	}
	f.Path = path
	return &f, nil
}

// Seeds are every set's AllocSvrs, each once, in file order.
func (f *ClusterFile) Seeds() []string {
	var seeds []string
	seen := map[string]bool{}
	for _, s := range f.Sets {
		for _, a := range s.Allocs {
			if !seen[a] {
				seen[a] = true
				seeds = append(seeds, a)
			}
		}
	}
	return seeds
}

// Layout is the layout of the scheme named `name` in [ids.schemes], loaded at nowMs as the
// AllocSvrs load it.
func (f *ClusterFile) Layout(name string, nowMs uint64) (*Layout, error) {
	s, ok := f.IDs.Schemes[name]
	if !ok {
		return nil, newError(codes.NotFound, "", "no id scheme %q in the cluster config", name)
	}
	l, err := s.Spec().Load(nowMs)
	if err != nil {
		return nil, newError(codes.InvalidArgument, "", "ids.schemes.%s: %v", name, err)
	}
	return l, nil
}

// Options are the options to connect to the cluster the file describes with the application
// identity certFile/keyFile (PEM; e.g. client.pem/client.key of `seqctl certs init`) over mutual
// TLS. A file without a [tls] section describes a plaintext cluster: use PlaintextOptions.
func (f *ClusterFile) Options(certFile, keyFile string) (Options, error) {
	if f.TLS == nil {
		return Options{}, newError(codes.InvalidArgument,
			"for a cluster served in plaintext (--insecure) use PlaintextOptions, explicitly",
			"%s has no [tls] section, so it describes no certificate authority to check the AllocSvrs against", f.Path)
	}
	dir := filepath.Dir(f.Path)
	ca := f.TLS.StoreCA
	if !filepath.IsAbs(ca) {
		ca = filepath.Join(dir, ca)
	}
	return Options{
		Seeds: f.Seeds(),
		TLS:   &TLSFiles{ServerName: f.TLS.ServerName, CertFile: certFile, KeyFile: keyFile, CAFile: ca},
		IDs:   &f.IDs,
	}, nil
}

// PlaintextOptions are the options to connect to the file's cluster without TLS (servers run
// with --insecure): only when asked for.
func (f *ClusterFile) PlaintextOptions() Options {
	return Options{Seeds: f.Seeds(), Plaintext: true, IDs: &f.IDs}
}

// FromClusterFile is LoadClusterFile and Options in one.
func FromClusterFile(path, certFile, keyFile string) (Options, error) {
	f, err := LoadClusterFile(path)
	if err != nil {
		return Options{}, err
	}
	return f.Options(certFile, keyFile)
}

// TLSFiles is the client's mutual TLS identity and the CA it checks the AllocSvrs against.
type TLSFiles struct {
	// ServerName is the cluster's [tls] server_name: the SDK checks that each AllocSvr's
	// certificate names alloc.<ServerName> (the Rust SDK's rule: addresses are IPs and one CA
	// may issue every role, so the role's name is what is checked).
	ServerName string
	// CertFile and KeyFile are the application's certificate (chain) and key, PEM.
	CertFile, KeyFile string
	// CAFile is the bundle the AllocSvrs' certificates chain to (the cluster file's store_ca).
	CAFile string
}

// AllocServerName is the name an AllocSvr's certificate carries for server name base.
func AllocServerName(base string) string { return "alloc." + base }

// config is the crypto/tls configuration of the identity. The certificate and key are read
// again at each handshake when their files changed (a rotation), the CA bundle once.
func (t *TLSFiles) config() (*tls.Config, error) {
	bad := func(format string, args ...interface{}) error {
		return newError(codes.InvalidArgument, "give the application's certificate and key (PEM) and the cluster's CA bundle",
			format, args...)
	}
	if t.ServerName == "" {
		return nil, bad("no server name: give the cluster file's [tls] server_name")
	}
	ca, err := os.ReadFile(t.CAFile)
	if err != nil {
		return nil, bad("cannot read the CA bundle %s: %v", t.CAFile, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, bad("%s holds no PEM certificate", t.CAFile)
	}
	id := &reloadingIdentity{cert: t.CertFile, key: t.KeyFile}
	if _, err := id.get(); err != nil {
		return nil, bad("%v", err)
	}
	return &tls.Config{
		MinVersion:           tls.VersionTLS12,
		RootCAs:              pool,
		ServerName:           AllocServerName(t.ServerName),
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return id.get() },
	}, nil
}

// reloadingIdentity is a certificate and key read again when either file's modification time
// or size changed (checked at most once a second, at a handshake).
type reloadingIdentity struct {
	cert, key string
	mu        sync.Mutex
	loaded    *tls.Certificate
	stamp     string
	checked   time.Time
}

func fileStamp(paths ...string) string {
	stamp := ""
	for _, p := range paths {
		if st, err := os.Stat(p); err == nil {
			stamp += fmt.Sprintf("%s:%d:%d;", p, st.ModTime().UnixNano(), st.Size())
		}
	}
	return stamp
}

func (r *reloadingIdentity) get() (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.loaded != nil && time.Since(r.checked) < time.Second {
		return r.loaded, nil
	}
	r.checked = time.Now()
	stamp := fileStamp(r.cert, r.key)
	if r.loaded != nil && stamp == r.stamp {
		return r.loaded, nil
	}
	pair, err := tls.LoadX509KeyPair(r.cert, r.key)
	if err != nil {
		if r.loaded != nil {
			// A rotation half done (the certificate renamed in before its key): keep the
			// identity that worked until both files match again.
			return r.loaded, nil
		}
		return nil, fmt.Errorf("cannot load the certificate %s and key %s: %v", r.cert, r.key, err)
	}
	r.loaded, r.stamp = &pair, stamp
	return r.loaded, nil
}
