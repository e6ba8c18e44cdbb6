//! Relaying one UDP flow: two ends that each take and give whole
//! datagrams ([`DatagramPort`]: a connected UDP socket, a client of a
//! listening socket, a tunnel stream carrying capsules), pumped both ways
//! until neither has sent anything for the idle timeout. A datagram is
//! passed on as it came or not at all, and an answer is never larger than
//! what the other end sent. Sockets are read through one scratch buffer
//! per thread, so a flow holds only the datagrams in flight, not a
//! 64 KiB buffer of its own.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use tokio::net::UdpSocket;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::splice::{SpliceEnd, SpliceOutcome};

/// The largest UDP payload (65,535 less the IPv4 and UDP headers).
pub const MAX_UDP_PAYLOAD: usize = 65_507;

/// One end of a UDP flow.
pub trait DatagramPort: Send {
    /// The next datagram; `None` when this end is done (a stream's end, a
    /// listener's flow table that dropped the flow).
    fn recv(&mut self) -> impl Future<Output = io::Result<Option<Bytes>>> + Send;
    /// Sends one datagram.
    fn send(&mut self, datagram: Bytes) -> impl Future<Output = io::Result<()>> + Send;
}

thread_local! {
    /// Where sockets are read: a datagram is copied out at its own size.
    static SCRATCH: std::cell::RefCell<Box<[u8]>> =
        std::cell::RefCell::new(vec![0; MAX_UDP_PAYLOAD].into_boxed_slice());
}

/// Receives one datagram from `socket` (connected or not) at its own size.
pub async fn receive(socket: &UdpSocket) -> io::Result<(Bytes, SocketAddr)> {
    loop {
        socket.readable().await?;
        // No await while the scratch buffer is borrowed.
        let received = SCRATCH.with_borrow_mut(|scratch| {
            socket
                .try_recv_from(scratch)
                .map(|(length, from)| (Bytes::copy_from_slice(&scratch[..length]), from))
        });
        match received {
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => continue,
            other => return other,
        }
    }
}

/// A UDP socket connected to one backend.
pub struct ConnectedUdp {
    socket: UdpSocket,
}

impl ConnectedUdp {
    /// A socket of `backend`'s family on an ephemeral port, connected to it,
    /// so that only its answers are read.
    pub async fn connect(backend: SocketAddr) -> io::Result<Self> {
        let local: SocketAddr = if backend.is_ipv4() {
            (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
        } else {
            (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
        };
        let socket = UdpSocket::bind(local).await?;
        socket.connect(backend).await?;
        Ok(Self { socket })
    }
}

impl DatagramPort for ConnectedUdp {
    async fn recv(&mut self) -> io::Result<Option<Bytes>> {
        loop {
            match receive(&self.socket).await {
                Ok((datagram, _)) => return Ok(Some(datagram)),
                // An ICMP port unreachable from an earlier send: the backend
                // is not listening (yet); UDP says nothing more than that.
                Err(error) if error.kind() == io::ErrorKind::ConnectionRefused => continue,
                Err(error) => return Err(error),
            }
        }
    }

    async fn send(&mut self, datagram: Bytes) -> io::Result<()> {
        match self.socket.send(&datagram).await {
            Ok(_) => Ok(()),
            Err(error) if error.kind() == io::ErrorKind::ConnectionRefused => Ok(()),
            Err(error) => Err(error),
        }
    }
}

/// A client of a listening UDP socket: its datagrams arrive through the
/// listener's flow table, answers go out from the listening socket (so the
/// client, and kube-proxy's connection tracking, see the address it sent to).
pub struct ListenerClient {
    pub socket: Arc<UdpSocket>,
    pub client: SocketAddr,
    pub arrivals: mpsc::Receiver<Bytes>,
    /// Bytes waiting in `arrivals`, which the listener bounds.
    pub queued: Arc<AtomicUsize>,
}

impl DatagramPort for ListenerClient {
    async fn recv(&mut self) -> io::Result<Option<Bytes>> {
        let datagram = self.arrivals.recv().await;
        if let Some(datagram) = &datagram {
            self.queued.fetch_sub(datagram.len(), Ordering::Relaxed);
        }
        Ok(datagram)
    }

    async fn send(&mut self, datagram: Bytes) -> io::Result<()> {
        self.socket
            .send_to(&datagram, self.client)
            .await
            .map(|_| ())
    }
}

/// Pumps datagrams between `client` and `backend` until one end is done
/// or nothing moved either way for `idle` (both `SpliceEnd::Closed`). A send that does not complete
/// within `idle` (a tunnel stream whose peer stopped reading) ends it too.
pub async fn pump<C, B>(mut client: C, mut backend: B, idle: Duration) -> SpliceOutcome
where
    C: DatagramPort,
    B: DatagramPort,
{
    let mut outcome = SpliceOutcome {
        client_to_backend: 0,
        backend_to_client: 0,
        end: SpliceEnd::Closed,
    };
    let mut deadline = Instant::now() + idle;
    loop {
        // Both receives are cancel-safe: a datagram is whole or not read.
        let (datagram, to_backend) = tokio::select! {
            received = client.recv() => (received, true),
            received = backend.recv() => (received, false),
            // Silence is how a UDP flow ends normally (there is no FIN):
            // counted as closed, not as a timeout.
            () = tokio::time::sleep_until(deadline) => return outcome,
        };
        let datagram = match datagram {
            Ok(Some(datagram)) => datagram,
            Ok(None) => return outcome,
            Err(error) => {
                outcome.end = SpliceEnd::Error(error);
                return outcome;
            }
        };
        let length = datagram.len() as u64;
        let sent = if to_backend {
            tokio::time::timeout(idle, backend.send(datagram)).await
        } else {
            tokio::time::timeout(idle, client.send(datagram)).await
        };
        match sent {
            Ok(Ok(())) => {}
            Ok(Err(error)) => {
                outcome.end = SpliceEnd::Error(error);
                return outcome;
            }
            Err(_) => {
                outcome.end = SpliceEnd::Stalled;
                return outcome;
            }
        }
        if to_backend {
            outcome.client_to_backend += length;
        } else {
            outcome.backend_to_client += length;
        }
        deadline = Instant::now() + idle;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_flow_carries_both_ways_and_ends_when_idle() {
        let backend = UdpSocket::bind("127.0.0.1:0").await.expect("bind");
        let backend_address = backend.local_addr().expect("address");
        let listener = Arc::new(UdpSocket::bind("127.0.0.1:0").await.expect("bind"));
        let client = UdpSocket::bind("127.0.0.1:0").await.expect("bind");
        client
            .connect(listener.local_addr().expect("address"))
            .await
            .expect("connect");
        let (arrive, arrivals) = mpsc::channel(8);
        let port = ListenerClient {
            socket: listener.clone(),
            client: client.local_addr().expect("address"),
            arrivals,
            queued: Arc::new(AtomicUsize::new(0)),
        };
        let upstream = ConnectedUdp::connect(backend_address)
            .await
            .expect("connect");
        let idle = Duration::from_millis(300);
        let flow = tokio::spawn(pump(port, upstream, idle));

        arrive
            .send(Bytes::from_static(b"question"))
            .await
            .expect("queued");
        let mut buffer = [0u8; 64];
        let (length, from) = backend.recv_from(&mut buffer).await.expect("arrives");
        assert_eq!(&buffer[..length], b"question");
        backend.send_to(b"the answer", from).await.expect("answer");
        let length = client.recv(&mut buffer).await.expect("answer arrives");
        assert_eq!(&buffer[..length], b"the answer");

        let started = Instant::now();
        let outcome = flow.await.expect("the flow ends");
        assert!(
            matches!(outcome.end, SpliceEnd::Closed),
            "{:?}",
            outcome.end
        );
        assert!(started.elapsed() >= idle - Duration::from_millis(50));
        assert_eq!(outcome.client_to_backend, 8);
        assert_eq!(outcome.backend_to_client, 10);
    }
}
