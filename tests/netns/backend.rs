//! Pods: echo servers whose listening socket lives in a pod namespace. Each
//! greets with its own identity and the address that dialled it
//! (`c3-pod1 10.10.0.231\n`), then echoes every byte back, so a client
//! learns which pod answered and by which hop it arrived.

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};

use tokio::io::AsyncWriteExt;
use tokio::task::JoinHandle;

use super::sys;

/// The port every pod listens on (the Services' target port).
pub const POD_PORT: u16 = 8080;

/// One running echo server.
pub struct Backend {
    peers: Arc<Mutex<Vec<IpAddr>>>,
    task: JoinHandle<()>,
}

impl Backend {
    /// Listens on `address` inside namespace `ns`. Call from a tokio runtime.
    pub fn start(name: &str, ns: &str, address: SocketAddr) -> Result<Backend, String> {
        let listener = sys::listen_in(ns, address)
            .map_err(|e| format!("backend {name} cannot listen on {address} in {ns}: {e}"))?;
        let peers = Arc::new(Mutex::new(Vec::new()));
        let (task_peers, identity) = (peers.clone(), name.to_owned());
        let task = tokio::spawn(async move {
            while let Ok((mut stream, peer)) = listener.accept().await {
                let _ = stream.set_nodelay(true);
                if let Ok(mut seen) = task_peers.lock() {
                    seen.push(peer.ip());
                }
                let greeting = format!("{identity} {}\n", peer.ip());
                tokio::spawn(async move {
                    if stream.write_all(greeting.as_bytes()).await.is_err() {
                        return;
                    }
                    let (mut read, mut write) = stream.split();
                    let _ = tokio::io::copy(&mut read, &mut write).await;
                    let _ = write.shutdown().await;
                });
            }
        });
        Ok(Backend { peers, task })
    }

    /// How many connections it accepted.
    pub fn accepted(&self) -> usize {
        self.peers.lock().map(|p| p.len()).unwrap_or(0)
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.task.abort();
    }
}
