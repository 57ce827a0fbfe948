//! The `/metrics` endpoint: a minimal HTTP/1.1 responder on a glommio
//! listener. It reads one request head (bounded), answers and closes; that
//! is all a Prometheus scraper needs.

use std::rc::Rc;
use std::sync::Arc;

use futures::{AsyncReadExt, AsyncWriteExt};
use glommio::net::{TcpListener, TcpStream};

use super::BrokerMetrics;

/// Largest request head read; a scrape request is a few hundred bytes.
const REQUEST_HEAD_BYTES_MAX: usize = 8 << 10;

/// Serves `/metrics` on `listener` until the task is dropped.
pub async fn serve(listener: TcpListener, metrics: Arc<BrokerMetrics>) {
    let metrics = Rc::new(metrics);
    loop {
        match listener.accept().await {
            Ok(stream) => {
                let metrics = metrics.clone();
                glommio::spawn_local(async move {
                    if let Err(error) = answer(stream, &metrics).await {
                        tracing::debug!(%error, "metrics request failed");
                    }
                })
                .detach();
            }
            Err(error) => tracing::warn!(%error, "metrics listener accept failed"),
        }
    }
}

async fn answer(mut stream: TcpStream, metrics: &BrokerMetrics) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(1024);
    let mut buffer = [0u8; 1024];
    while !head.windows(4).any(|window| window == b"\r\n\r\n") {
        let read = stream.read(&mut buffer).await?;
        if read == 0 || head.len() + read > REQUEST_HEAD_BYTES_MAX {
            return Ok(());
        }
        head.extend_from_slice(&buffer[..read]);
    }
    let request_line = head.split(|byte| *byte == b'\r').next().unwrap_or_default();
    let mut parts = request_line.split(|byte| *byte == b' ');
    let (method, path) = (
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
    );
    let response = if method == b"GET" && (path == b"/metrics" || path.starts_with(b"/metrics?")) {
        let body = metrics.encode();
        format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
    } else {
        let body = "not found: metrics are at /metrics\n";
        format!(
            "HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
    };
    stream.write_all(response.as_bytes()).await?;
    stream.flush().await?;
    stream.close().await
}
