//! Relaying one UDP flow: two ends that each take and give whole
//! datagrams ([`DatagramPort`]: a connected UDP socket, a client of a
//! listening socket, a tunnel stream carrying capsules), pumped both ways
//! until neither has sent anything for the idle timeout. A datagram is
//! passed on as it came or not at all, and an answer is never larger than
//! what the other end sent. Sockets are read through one scratch buffer
//! per thread, so a flow holds only the datagrams in flight, not a
//! 64 KiB buffer of its own.
//!
//! Each direction is its own half-pump, and neither stops reading while
//! its send waits: what arrives meanwhile waits in a small queue, and past
//! it is dropped, as UDP may. A tunnel stream whose peer stops reading (a
//! zero window) therefore holds a few datagrams of the flow's, never the
//! window the peer keeps filling, and a send blocked past the stall
//! timeout ends the flow.

use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use tokio::net::UdpSocket;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::splice::{SpliceEnd, SpliceOutcome};

/// The largest UDP payload (65,535 less the IPv4 and UDP headers).
pub const MAX_UDP_PAYLOAD: usize = 65_507;

/// One end of a UDP flow, split into what it receives and what it sends,
/// so that both directions run at once.
pub trait DatagramPort: Send {
    type Incoming: DatagramIncoming;
    type Outgoing: DatagramOutgoing;
    fn split(self) -> (Self::Incoming, Self::Outgoing);
}

/// What one end of a flow receives.
pub trait DatagramIncoming: Send {
    /// The next datagram; `None` when this end is done (a stream's end, a
    /// listener's flow table that dropped the flow). Cancel-safe: a
    /// datagram is whole or not read.
    fn recv(&mut self) -> impl Future<Output = io::Result<Option<Bytes>>> + Send;
}

/// Where one end of a flow sends.
pub trait DatagramOutgoing: Send {
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
    socket: Arc<UdpSocket>,
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
        Ok(Self {
            socket: Arc::new(socket),
        })
    }
}

/// Either half of a [`ConnectedUdp`]: one socket serves both.
pub struct ConnectedHalf(Arc<UdpSocket>);

impl DatagramPort for ConnectedUdp {
    type Incoming = ConnectedHalf;
    type Outgoing = ConnectedHalf;

    fn split(self) -> (ConnectedHalf, ConnectedHalf) {
        (
            ConnectedHalf(self.socket.clone()),
            ConnectedHalf(self.socket),
        )
    }
}

impl DatagramIncoming for ConnectedHalf {
    async fn recv(&mut self) -> io::Result<Option<Bytes>> {
        loop {
            match receive(&self.0).await {
                Ok((datagram, _)) => return Ok(Some(datagram)),
                // An ICMP port unreachable from an earlier send: the backend
                // is not listening (yet); UDP says nothing more than that.
                Err(error) if error.kind() == io::ErrorKind::ConnectionRefused => continue,
                Err(error) => return Err(error),
            }
        }
    }
}

impl DatagramOutgoing for ConnectedHalf {
    async fn send(&mut self, datagram: Bytes) -> io::Result<()> {
        match self.0.send(&datagram).await {
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
    pub rule: AnswerRule,
    /// What the client earned and what was dropped; the listener reads it.
    pub credit: Arc<AnswerCredit>,
}

/// How a listener's client earns answers and shows it is there. Its source
/// address is only what its datagram says: until the client has spoken
/// twice, it gets [`UNCONFIRMED_ANSWERS`] answers per datagram and its flow
/// ends after `unconfirmed_timeout` without a second one; after that,
/// `per_request` answers per datagram, banked up to four times that.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AnswerRule {
    pub per_request: u32,
    pub unconfirmed_timeout: Duration,
}

/// Answers per datagram of a client that has spoken once.
pub const UNCONFIRMED_ANSWERS: u32 = 4;

/// A flow's answers to its client: earned by its datagrams, spent by the
/// answers sent, and those dropped for want of credit.
#[derive(Debug, Default)]
pub struct AnswerCredit {
    credit: AtomicU32,
    requests: AtomicU32,
    dropped: AtomicU64,
}

impl AnswerCredit {
    /// Answers dropped so far.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    fn earn(&self, rule: &AnswerRule) {
        let requests = self
            .requests
            .fetch_add(1, Ordering::Relaxed)
            .saturating_add(1);
        let grant = if requests >= 2 {
            rule.per_request
        } else {
            UNCONFIRMED_ANSWERS
        };
        let bank = grant.saturating_mul(4);
        let _ = self
            .credit
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |credit| {
                Some(credit.saturating_add(grant).min(bank))
            });
    }

    fn spend(&self) -> bool {
        let spent = self
            .credit
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |credit| {
                credit.checked_sub(1)
            });
        if spent.is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
        spent.is_ok()
    }
}

/// What a listener's client sent, as its flow table queued it.
pub struct ClientArrivals {
    arrivals: mpsc::Receiver<Bytes>,
    queued: Arc<AtomicUsize>,
    rule: AnswerRule,
    credit: Arc<AnswerCredit>,
}

/// Answers to a listener's client, from the listening socket.
pub struct ClientAnswers {
    socket: Arc<UdpSocket>,
    client: SocketAddr,
    credit: Arc<AnswerCredit>,
}

impl DatagramPort for ListenerClient {
    type Incoming = ClientArrivals;
    type Outgoing = ClientAnswers;

    fn split(self) -> (ClientArrivals, ClientAnswers) {
        let arrivals = ClientArrivals {
            arrivals: self.arrivals,
            queued: self.queued,
            rule: self.rule,
            credit: self.credit.clone(),
        };
        let answers = ClientAnswers {
            socket: self.socket,
            client: self.client,
            credit: self.credit,
        };
        (arrivals, answers)
    }
}

impl DatagramIncoming for ClientArrivals {
    async fn recv(&mut self) -> io::Result<Option<Bytes>> {
        let next = self.arrivals.recv();
        // A client that has spoken once must speak again soon, or its flow
        // ends: its address may be anyone's.
        let datagram = if self.credit.requests.load(Ordering::Relaxed) == 1 {
            match tokio::time::timeout(self.rule.unconfirmed_timeout, next).await {
                Ok(datagram) => datagram,
                Err(_) => return Ok(None),
            }
        } else {
            next.await
        };
        if let Some(datagram) = &datagram {
            self.queued.fetch_sub(datagram.len(), Ordering::Relaxed);
            self.credit.earn(&self.rule);
        }
        Ok(datagram)
    }
}

impl DatagramOutgoing for ClientAnswers {
    async fn send(&mut self, datagram: Bytes) -> io::Result<()> {
        // An answer the client did not earn is dropped, as UDP may.
        if !self.credit.spend() {
            return Ok(());
        }
        self.socket
            .send_to(&datagram, self.client)
            .await
            .map(|_| ())
    }
}

/// Pumps datagrams between `client` and `backend` until one end is done
/// or nothing arrived either way for `idle` (both `SpliceEnd::Closed`). A
/// send that does not complete within `stall` (a tunnel stream whose peer
/// stopped reading) ends it as `SpliceEnd::Stalled`.
pub async fn pump<C, B>(client: C, backend: B, idle: Duration, stall: Duration) -> SpliceOutcome
where
    C: DatagramPort,
    B: DatagramPort,
{
    let (client_in, client_out) = client.split();
    let (backend_in, backend_out) = backend.split();
    let heard = Heard::new();
    let (up, down) = (AtomicU64::new(0), AtomicU64::new(0));
    let end = tokio::select! {
        end = half(client_in, backend_out, stall, &heard, &up) => end,
        end = half(backend_in, client_out, stall, &heard, &down) => end,
        // Silence is how a UDP flow ends normally (there is no FIN):
        // counted as closed, not as a timeout.
        () = heard.silent_for(idle) => SpliceEnd::Closed,
    };
    SpliceOutcome {
        client_to_backend: up.load(Ordering::Relaxed),
        backend_to_client: down.load(Ordering::Relaxed),
        end,
    }
}

/// When a flow last heard a datagram, either way.
struct Heard {
    started: Instant,
    /// Milliseconds after `started`.
    last: AtomicU64,
}

impl Heard {
    fn new() -> Self {
        Self {
            started: Instant::now(),
            last: AtomicU64::new(0),
        }
    }

    fn now(&self) {
        let elapsed = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last.store(elapsed, Ordering::Relaxed);
    }

    /// Returns once nothing was heard for `idle`.
    async fn silent_for(&self, idle: Duration) {
        loop {
            let last = Duration::from_millis(self.last.load(Ordering::Relaxed));
            let until = self.started + last + idle;
            if Instant::now() >= until {
                return;
            }
            tokio::time::sleep_until(until).await;
        }
    }
}

/// What one direction holds while its send waits: a burst arriving while a
/// socket's first send waits for the reactor is kept, a flood behind a
/// receiver that stopped reading is not. Both directions together hold at
/// most 64 KiB, the copy buffer a flow is charged beside its window.
const WAITING_DATAGRAMS: usize = 32;
const WAITING_BYTES: usize = 32 * 1024;

/// One direction of a flow: `from` → `to`, counting the bytes sent in
/// `moved`. While a send waits, `from` is still read: what it gives waits
/// its turn up to [`WAITING_DATAGRAMS`] and [`WAITING_BYTES`], and past
/// that is dropped, so the sender's end (a tunnel stream's window) never
/// fills behind a slow receiver.
async fn half<I, O>(
    mut from: I,
    mut to: O,
    stall: Duration,
    heard: &Heard,
    moved: &AtomicU64,
) -> SpliceEnd
where
    I: DatagramIncoming,
    O: DatagramOutgoing,
{
    let mut waiting: VecDeque<Bytes> = VecDeque::new();
    let mut waiting_bytes = 0;
    loop {
        let datagram = match waiting.pop_front() {
            Some(datagram) => {
                waiting_bytes -= datagram.len();
                datagram
            }
            None => match from.recv().await {
                Ok(Some(datagram)) => {
                    heard.now();
                    datagram
                }
                Ok(None) => return SpliceEnd::Closed,
                Err(error) => return SpliceEnd::Error(error),
            },
        };
        let length = datagram.len() as u64;
        let sending = tokio::time::timeout(stall, to.send(datagram));
        tokio::pin!(sending);
        let sent = loop {
            tokio::select! {
                biased;
                sent = &mut sending => break sent,
                received = from.recv() => match received {
                    Ok(Some(datagram)) => {
                        heard.now();
                        let room = waiting.len() < WAITING_DATAGRAMS
                            && waiting_bytes + datagram.len() <= WAITING_BYTES;
                        if room {
                            waiting_bytes += datagram.len();
                            waiting.push_back(datagram);
                        }
                    }
                    Ok(None) => return SpliceEnd::Closed,
                    Err(error) => return SpliceEnd::Error(error),
                },
            }
        };
        match sent {
            Ok(Ok(())) => {
                moved.fetch_add(length, Ordering::Relaxed);
            }
            Ok(Err(error)) => return SpliceEnd::Error(error),
            Err(_) => return SpliceEnd::Stalled,
        }
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
            rule: AnswerRule {
                per_request: 64,
                unconfirmed_timeout: Duration::from_secs(5),
            },
            credit: Arc::default(),
        };
        let upstream = ConnectedUdp::connect(backend_address)
            .await
            .expect("connect");
        let idle = Duration::from_millis(300);
        let flow = tokio::spawn(pump(port, upstream, idle, idle));

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

    /// A flow of `client` on `listener` to `backend`, pumped in the
    /// background: where its datagrams arrive, its answer credit, and the
    /// pump.
    async fn listener_flow(
        listener: &Arc<UdpSocket>,
        client: &UdpSocket,
        backend: &UdpSocket,
        unconfirmed_timeout: Duration,
        idle: Duration,
    ) -> (
        mpsc::Sender<Bytes>,
        Arc<AnswerCredit>,
        tokio::task::JoinHandle<SpliceOutcome>,
    ) {
        let (arrive, arrivals) = mpsc::channel(8);
        let credit = Arc::new(AnswerCredit::default());
        let port = ListenerClient {
            socket: listener.clone(),
            client: client.local_addr().expect("address"),
            arrivals,
            queued: Arc::new(AtomicUsize::new(0)),
            rule: AnswerRule {
                per_request: 16,
                unconfirmed_timeout,
            },
            credit: credit.clone(),
        };
        let upstream = ConnectedUdp::connect(backend.local_addr().expect("address"))
            .await
            .expect("connect");
        (
            arrive,
            credit,
            tokio::spawn(pump(port, upstream, idle, idle)),
        )
    }

    /// A client that sent one datagram (its address may be anyone's) gets
    /// at most four answers for it, and its flow ends soon without a
    /// second datagram; one that spoke twice gets its answers.
    #[tokio::test]
    async fn a_client_earns_answers_and_one_that_spoke_once_is_dropped_soon() {
        let backend = UdpSocket::bind("127.0.0.1:0").await.expect("bind");
        let listener = Arc::new(UdpSocket::bind("127.0.0.1:0").await.expect("bind"));
        let client = UdpSocket::bind("127.0.0.1:0").await.expect("bind");
        let unconfirmed_timeout = Duration::from_millis(300);
        let idle = Duration::from_secs(30);
        let started = Instant::now();
        let (arrive, credit, flow) =
            listener_flow(&listener, &client, &backend, unconfirmed_timeout, idle).await;
        arrive
            .send(Bytes::from_static(b"q1"))
            .await
            .expect("queued");
        let mut buffer = [0u8; 64];
        let (_, from) = backend.recv_from(&mut buffer).await.expect("arrives");
        for _ in 0..10 {
            backend.send_to(b"answer", from).await.expect("answer");
        }
        let mut answers = 0;
        while let Ok(Ok(_)) =
            tokio::time::timeout(Duration::from_millis(200), client.recv(&mut buffer)).await
        {
            answers += 1;
        }
        assert_eq!(
            answers, UNCONFIRMED_ANSWERS,
            "four answers for one datagram"
        );
        let outcome = flow.await.expect("the flow ends");
        assert!(
            matches!(outcome.end, SpliceEnd::Closed),
            "{:?}",
            outcome.end
        );
        assert!(
            started.elapsed() < idle,
            "ended by the unconfirmed timeout, not the idle one"
        );
        assert_eq!(credit.dropped(), 6);

        // A client that speaks twice keeps its flow and earns more.
        let (arrive, credit, flow) =
            listener_flow(&listener, &client, &backend, unconfirmed_timeout, idle).await;
        for question in [&b"q1"[..], b"q2"] {
            arrive
                .send(Bytes::copy_from_slice(question))
                .await
                .expect("queued");
            backend.recv_from(&mut buffer).await.expect("arrives");
        }
        tokio::time::sleep(unconfirmed_timeout * 2).await;
        assert!(!flow.is_finished(), "a confirmed flow lives on");
        let (_, from) = {
            arrive
                .send(Bytes::from_static(b"q3"))
                .await
                .expect("queued");
            backend.recv_from(&mut buffer).await.expect("arrives")
        };
        for _ in 0..10 {
            backend.send_to(b"answer", from).await.expect("answer");
        }
        let mut answers = 0;
        while let Ok(Ok(_)) =
            tokio::time::timeout(Duration::from_millis(200), client.recv(&mut buffer)).await
        {
            answers += 1;
        }
        assert_eq!(answers, 10);
        assert_eq!(credit.dropped(), 0);
        flow.abort();
    }
}
