//! A fault-injecting TCP proxy on 127.0.0.1: how the nemesis cuts one link (AllocSvr → store
//! member, store member → store member) without touching any other. While cut, open
//! connections are dropped and new ones are accepted but never forwarded (a black hole, like a
//! partition, rather than a quick refusal), until healed.

use std::net::SocketAddr;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

pub struct Proxy {
    pub listen: SocketAddr,
    cut: watch::Sender<bool>,
}

impl Proxy {
    /// Starts forwarding `127.0.0.1:<free port>` → `target` on the current Tokio runtime.
    pub fn start(port: u16, target: String) -> std::io::Result<Proxy> {
        let std_listener = std::net::TcpListener::bind(("127.0.0.1", port))?;
        std_listener.set_nonblocking(true)?;
        let listener = TcpListener::from_std(std_listener)?;
        let listen = listener.local_addr()?;
        let (cut, cut_rx) = watch::channel(false);
        tokio::spawn(accept_loop(listener, target, cut_rx));
        Ok(Proxy { listen, cut })
    }

    pub fn set_cut(&self, cut: bool) {
        self.cut.send_replace(cut);
    }
}

async fn accept_loop(listener: TcpListener, target: String, cut: watch::Receiver<bool>) {
    loop {
        let Ok((inbound, _)) = listener.accept().await else { continue };
        let _ = inbound.set_nodelay(true);
        tokio::spawn(connection(inbound, target.clone(), cut.clone()));
    }
}

async fn connection(mut inbound: TcpStream, target: String, mut cut: watch::Receiver<bool>) {
    if *cut.borrow() {
        // Black hole until healed, then drop: the caller sees a hang, then a reset.
        let _ = cut.wait_for(|c| !*c).await;
        return;
    }
    let Ok(mut outbound) = TcpStream::connect(&target).await else { return };
    let _ = outbound.set_nodelay(true);
    tokio::select! {
        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
        _ = cut.wait_for(|c| *c) => {}
    }
}
