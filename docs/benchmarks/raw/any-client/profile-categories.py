import re, subprocess, sys
# Self time by category from perf report (leaf symbols), per file.
CATS = [
 ("TLS crypto (ring/rustls)", r"ring|rustls|aes|gcm|chacha|sha|poly1305|GFp|x25519"),
 ("HTTP/2 (h2)", r"\bh2::"),
 ("HTTP/1 (hyper h1)", r"hyper::proto::h1|httparse"),
 ("hyper/tonic/tower/axum", r"hyper|tonic|tower|axum|http_body|matchit"),
 ("JSON (serde_json)", r"serde_json|serde::"),
 ("protobuf (prost)", r"prost"),
 ("seqsvr code", r"seqsvr|allocsvr"),
 ("tokio runtime", r"tokio|mio"),
 ("malloc/free/memcpy", r"malloc|free|memmove|memcpy|memset|cfree|realloc|_int_|arena|tcache"),
 ("kernel: network (tcp, loopback)", r"tcp|inet|ip_|sk_|skb|sock|net_|__dev|loopback|napi|nf_|__netif"),
 ("kernel: scheduling, syscalls, futex, epoll", r"schedule|finish_task|futex|epoll|syscall|switch|entry_|__x64|irq|do_|exit_to|ttwu|enqueue|dequeue|update_|pick_|wake|hrtimer|timer"),
]
def cats(path):
    out = subprocess.run(["perf","report","-i",path,"--stdio","--no-children","-g","none","--sort","symbol","--percent-limit","0"],capture_output=True,text=True).stdout
    tot = {}
    samples = 0
    m = re.search(r"# Samples: (\d+)", out)
    if m: samples = int(m.group(1))
    for line in out.splitlines():
        m = re.match(r"\s+([\d.]+)%\s+\[(.)\]\s+(.*)", line)
        if not m: continue
        pct, kind, sym = float(m.group(1)), m.group(2), m.group(3)
        name = "other"
        for c, rx in CATS:
            if c.startswith("kernel") and kind != "k": continue
            if re.search(rx, sym):
                name = c; break
        else:
            if kind == "k": name = "kernel: other"
        tot[name] = tot.get(name, 0) + pct
    return samples, tot
for path in sys.argv[1:]:
    n, t = cats(path)
    print(f"== {path}: {n} samples")
    for k, v in sorted(t.items(), key=lambda x: -x[1]):
        print(f"   {v:5.1f}%  {k}")
