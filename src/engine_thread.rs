//! A server loop on a thread of its own. The DHCP engines each run on one thread with a
//! single-threaded runtime: the engine's state is touched only there, every socket is
//! read in arrival order without locks, and a datagram is never handed from one thread
//! to another on its way to a decision (the hand-off and the wake-up it costs were a
//! fifth of DHCPv6's CPU per exchange when its loop ran on the shared runtime).

use std::future::Future;
use std::io;
use std::task::Poll;

use tokio::net::UdpSocket;

/// Runs the future `make` returns on a new thread named `name`, with its own
/// single-threaded runtime, and waits for its result. A thread that cannot start, a
/// runtime that cannot be built and a panic are errors, never a clean stop.
pub async fn run_on_own_thread<T, F, Fut>(name: &str, make: F) -> io::Result<T>
where
    T: Send + 'static,
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = T>,
{
    let (done_tx, done_rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            let result = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map(|rt| rt.block_on(make()));
            let _ = done_tx.send(result);
        })?;
    // A dropped sender means the thread panicked.
    done_rx
        .await
        .unwrap_or_else(|_| Err(io::Error::other(format!("the {name} thread panicked"))))
}

/// Ready when any of a loop's sockets has a datagram to read.
pub async fn any_readable(sockets: &[UdpSocket]) -> io::Result<()> {
    std::future::poll_fn(|cx| {
        for s in sockets {
            if let Poll::Ready(r) = s.poll_recv_ready(cx) {
                return Poll::Ready(r);
            }
        }
        Poll::Pending
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::run_on_own_thread;

    #[tokio::test]
    async fn the_result_comes_back_from_the_named_thread() {
        let name = run_on_own_thread("engine-test", || async {
            std::thread::current().name().map(str::to_owned)
        })
        .await
        .unwrap();
        assert_eq!(name.as_deref(), Some("engine-test"));
    }

    #[tokio::test]
    async fn a_panic_is_an_error() {
        let r: std::io::Result<()> =
            run_on_own_thread("engine-panics", || async { panic!("boom") }).await;
        let e = r.unwrap_err();
        assert!(e.to_string().contains("engine-panics"), "{e}");
    }
}
