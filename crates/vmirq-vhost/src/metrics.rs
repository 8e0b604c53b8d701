//! A minimal Prometheus endpoint: every HTTP request on the metrics socket gets the counter
//! text. One request per connection, bounded reads and timeouts, served by one thread.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

/// Largest request head read before answering.
const MAX_REQUEST_BYTES: usize = 8192;
/// Read and write timeout per connection.
const IO_TIMEOUT: Duration = Duration::from_secs(1);

/// Renders the metrics text (e.g. [`crate::counters::prometheus`] of the current counters).
pub type Render = Box<dyn Fn() -> String + Send>;

/// Bind `addr` and serve the text `render` returns from a background thread.
///
/// # Errors
/// When the address cannot be bound.
pub fn spawn(addr: SocketAddr, render: Render) -> io::Result<SocketAddr> {
    let listener = TcpListener::bind(addr)?;
    let bound = listener.local_addr()?;
    tracing::info!(%bound, "metrics endpoint");
    std::thread::Builder::new()
        .name("vmirq-metrics".to_owned())
        .spawn(move || {
            for stream in listener.incoming().flatten() {
                if let Err(e) = answer(stream, &render) {
                    tracing::debug!(error = %e, "metrics request failed");
                }
            }
        })?;
    Ok(bound)
}

fn answer(mut stream: TcpStream, render: &Render) -> io::Result<()> {
    stream.set_read_timeout(Some(IO_TIMEOUT))?;
    stream.set_write_timeout(Some(IO_TIMEOUT))?;
    let mut buf = [0u8; MAX_REQUEST_BYTES];
    let mut got = 0;
    // Read until the end of the request head, the buffer is full, or the peer stops.
    while got < buf.len() && !buf[..got].windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut buf[got..])?;
        if n == 0 {
            break;
        }
        got += n;
    }
    let body = render();
    let head = format!(
        "HTTP/1.0 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes())?;
    stream.write_all(body.as_bytes())
}
