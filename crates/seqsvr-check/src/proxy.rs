//! A fault-injecting TCP proxy on 127.0.0.1: how the nemesis cuts or slows one link (AllocSvr →
//! store member, store member → store member) without touching any other. While cut, open
//! connections are dropped and new ones are accepted but never forwarded (a black hole, like a
//! partition, rather than a quick refusal), until healed. A delay holds every chunk of bytes
//! for a while before forwarding it, in order, separately in each direction: `forward` is what
//! the link's dialler sends (requests), `back` what the target answers (replies).

use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

/// How long bytes are held in each direction of a link.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Delay {
    /// Dialler → target (requests).
    pub forward: Duration,
    /// Target → dialler (replies).
    pub back: Duration,
}

pub struct Proxy {
    pub listen: SocketAddr,
    cut: watch::Sender<bool>,
    delay: watch::Sender<Delay>,
}

impl Proxy {
    /// Starts forwarding `127.0.0.1:<free port>` → `target` on the current Tokio runtime.
    pub fn start(port: u16, target: String) -> std::io::Result<Proxy> {
        let std_listener = std::net::TcpListener::bind(("127.0.0.1", port))?;
        std_listener.set_nonblocking(true)?;
        let listener = TcpListener::from_std(std_listener)?;
        let listen = listener.local_addr()?;
        let (cut, cut_rx) = watch::channel(false);
        let (delay, delay_rx) = watch::channel(Delay::default());
        tokio::spawn(accept_loop(listener, target, cut_rx, delay_rx));
        Ok(Proxy { listen, cut, delay })
    }

    pub fn set_cut(&self, cut: bool) {
        self.cut.send_replace(cut);
    }

    /// Holds bytes read from now on for `delay` (per direction) before forwarding them, on open
    /// connections and new ones. Bytes already held keep their time; order is kept either way.
    /// [`Delay::default`] forwards at once again.
    pub fn set_delay(&self, delay: Delay) {
        self.delay.send_replace(delay);
    }
}

async fn accept_loop(
    listener: TcpListener,
    target: String,
    cut: watch::Receiver<bool>,
    delay: watch::Receiver<Delay>,
) {
    loop {
        let Ok((inbound, _)) = listener.accept().await else { continue };
        let _ = inbound.set_nodelay(true);
        tokio::spawn(connection(inbound, target.clone(), cut.clone(), delay.clone()));
    }
}

async fn connection(
    inbound: TcpStream,
    target: String,
    mut cut: watch::Receiver<bool>,
    delay: watch::Receiver<Delay>,
) {
    if *cut.borrow() {
        // Black hole until healed, then drop: the caller sees a hang, then a reset.
        let _ = cut.wait_for(|c| !*c).await;
        return;
    }
    let Ok(outbound) = TcpStream::connect(&target).await else { return };
    let _ = outbound.set_nodelay(true);
    let (in_read, in_write) = inbound.into_split();
    let (out_read, out_write) = outbound.into_split();
    let forward = pump(in_read, out_write, delay.clone(), |d| d.forward);
    let back = pump(out_read, in_write, delay, |d| d.back);
    tokio::select! {
        // Both directions until each saw its end of stream, or the first error.
        _ = async { tokio::try_join!(forward, back) } => {}
        _ = cut.wait_for(|c| *c) => {}
    }
}

/// Copies `from` to `to`, holding each chunk for the delay `pick` names at the time it was
/// read. A reader and a writer joined by a queue: reading never waits for a held chunk, and
/// the writer forwards chunks in the order read (a chunk is never sent before the one read
/// before it, even if the delay was shortened in between).
async fn pump(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    delay: watch::Receiver<Delay>,
    pick: fn(&Delay) -> Duration,
) -> std::io::Result<()> {
    let (tx, mut rx) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let read = async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = from.read(&mut buf).await?;
            if n == 0 {
                return Ok::<(), std::io::Error>(()); // end of stream; dropping tx ends the writer
            }
            let due = Instant::now() + pick(&delay.borrow());
            if tx.send((due, buf[..n].to_vec())).is_err() {
                return Ok(()); // the writer failed and said why
            }
        }
    };
    let write = async move {
        while let Some((due, bytes)) = rx.recv().await {
            tokio::time::sleep_until(due).await;
            to.write_all(&bytes).await?;
        }
        to.shutdown().await
    };
    tokio::try_join!(read, write).map(|_| ())
}
