//! The UDP side of the DNS listener: a few worker threads share the socket,
//! each reading the queries waiting for it in one `recvmmsg` and sending
//! their answers in one `sendmmsg`, as NSD does. Under load a wake-up then
//! carries many queries, and the syscall and wake-up costs are shared among
//! them; with one query waiting, it is one query per call, as before.
//!
//! The workers are plain threads, not tasks: an answer is computed, never
//! waited for, so nothing here would yield to the runtime, and blocking
//! reads with a short timeout (to notice `stop`) cost no epoll round trip.

use std::io::{IoSlice, IoSliceMut};
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::socket::{
    ControlMessage, MsgFlags, MultiHeaders, SockaddrStorage, recvmmsg, sendmmsg,
};

use super::message::Transport;
use super::rate::ResponseRate;
use super::zone::Zone;
use crate::state::GatewayState;

/// Queries one worker reads (and answers sent) per call at most.
const BATCH: usize = 32;
/// Largest UDP query read; anything longer is cut and then fails to decode.
const QUERY_BUFFER: usize = 4096;
/// How often an idle worker looks at `stop`.
const STOP_POLL: Duration = Duration::from_millis(200);
/// Pause after a receive error that is not about one client.
const ERROR_BACKOFF: Duration = Duration::from_millis(100);

/// Starts `count` workers on `socket`; they return once `stop` is set.
pub(super) fn spawn(
    socket: Arc<UdpSocket>,
    state: Arc<GatewayState>,
    zone: Arc<Zone>,
    stop: Arc<AtomicBool>,
    count: usize,
) -> std::io::Result<Vec<JoinHandle<()>>> {
    socket.set_nonblocking(false)?;
    socket.set_read_timeout(Some(STOP_POLL))?;
    // One table for every worker: a source's queries reach any of them.
    let rate = Arc::new(ResponseRate::default());
    (0..count)
        .map(|n| {
            let (socket, state, zone, stop, rate) = (
                socket.clone(),
                state.clone(),
                zone.clone(),
                stop.clone(),
                rate.clone(),
            );
            std::thread::Builder::new()
                .name(format!("strait-dns-udp-{n}"))
                .spawn(move || serve(&socket, &state, &zone, &rate, &stop))
        })
        .collect()
}

/// The address a query came from, when it can be answered: port 0 cannot
/// be, and such a source is forged.
fn ip_of(address: &SockaddrStorage) -> Option<std::net::IpAddr> {
    address
        .as_sockaddr_in()
        .map(|v4| SocketAddr::from(*v4).ip())
        .or_else(|| {
            address
                .as_sockaddr_in6()
                .map(|v6| std::net::IpAddr::V6(v6.ip()))
        })
}

fn answerable(address: Option<SockaddrStorage>) -> Option<SockaddrStorage> {
    let address = address?;
    let port = address
        .as_sockaddr_in()
        .map(|v4| SocketAddr::from(*v4).port())
        .or_else(|| address.as_sockaddr_in6().map(|v6| v6.port()))?;
    (port != 0).then_some(address)
}

fn serve(
    socket: &UdpSocket,
    state: &GatewayState,
    zone: &Zone,
    rate: &ResponseRate,
    stop: &AtomicBool,
) {
    let fd = socket.as_raw_fd();
    let mut buffers = vec![[0u8; QUERY_BUFFER]; BATCH];
    let mut receive_headers = MultiHeaders::<SockaddrStorage>::preallocate(BATCH, None);
    let mut send_headers = MultiHeaders::<SockaddrStorage>::preallocate(BATCH, None);
    let mut received: Vec<(usize, Option<SockaddrStorage>)> = Vec::with_capacity(BATCH);
    let mut replies: Vec<Vec<u8>> = Vec::with_capacity(BATCH);
    let mut peers: Vec<Option<SockaddrStorage>> = Vec::with_capacity(BATCH);
    while !stop.load(Ordering::Relaxed) {
        received.clear();
        {
            let mut slices: Vec<[IoSliceMut<'_>; 1]> = buffers
                .iter_mut()
                .map(|buffer| [IoSliceMut::new(buffer)])
                .collect();
            // Waits for the first query (at most STOP_POLL), then takes
            // what else is queued without waiting.
            match recvmmsg(
                fd,
                &mut receive_headers,
                slices.iter_mut(),
                MsgFlags::MSG_WAITFORONE,
                None,
            ) {
                Ok(messages) => received.extend(messages.map(|m| (m.bytes, m.address))),
                Err(Errno::EAGAIN | Errno::EINTR) => continue,
                Err(error) => {
                    tracing::debug!(%error, "dns: udp receive failed");
                    std::thread::sleep(ERROR_BACKOFF);
                    continue;
                }
            }
        }
        replies.clear();
        peers.clear();
        for ((length, address), buffer) in received.iter().zip(&buffers) {
            let Some(peer) = answerable(*address) else {
                continue;
            };
            let query = buffer.get(..*length).unwrap_or_default();
            let Some(reply) = super::counted::answer(state, zone, query, Transport::Udp) else {
                continue;
            };
            let (reply, slipped) = match ip_of(&peer) {
                Some(source) => rate.check(source, query, reply, Instant::now()),
                None => (reply, false),
            };
            if slipped {
                state.metrics.dns_slipped();
            }
            if !reply.is_empty() {
                replies.push(reply);
                peers.push(Some(peer));
            }
        }
        send_all(fd, &mut send_headers, &replies, &peers);
    }
}

/// Sends every reply to its peer, in as few `sendmmsg` calls as the kernel
/// allows. A reply the kernel refuses (an unreachable client, a full
/// buffer) is dropped, as a lost datagram would be; the rest still go.
fn send_all(
    fd: std::os::fd::RawFd,
    headers: &mut MultiHeaders<SockaddrStorage>,
    replies: &[Vec<u8>],
    peers: &[Option<SockaddrStorage>],
) {
    let no_control: [ControlMessage<'_>; 0] = [];
    let mut sent = 0;
    while sent < replies.len() {
        let slices: Vec<[IoSlice<'_>; 1]> = replies[sent..]
            .iter()
            .map(|reply| [IoSlice::new(reply)])
            .collect();
        match sendmmsg(
            fd,
            headers,
            &slices,
            &peers[sent..],
            no_control,
            MsgFlags::empty(),
        ) {
            Ok(results) => match results.count() {
                0 => return,
                n => sent += n,
            },
            Err(Errno::EINTR) => {}
            Err(error) => {
                tracing::debug!(%error, "dns: udp send failed");
                sent += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_source_port_of_zero_is_not_answered() {
        let forged =
            SockaddrStorage::from("127.0.0.1:0".parse::<SocketAddr>().expect("an address"));
        assert!(answerable(Some(forged)).is_none());
        let client = SockaddrStorage::from("[::1]:5353".parse::<SocketAddr>().expect("an address"));
        assert!(answerable(Some(client)).is_some());
        assert!(answerable(None).is_none());
    }
}
