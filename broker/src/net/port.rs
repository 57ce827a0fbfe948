//! A shard's client ports: bound when the shard starts, so that a port in
//! use fails the start at once, but listening only once the shard serves
//! (a single node, whose partitions open first): until then a connection
//! is refused at once, instead of waiting in the backlog for as long as
//! the partitions take to open (or being reset if the start fails).

use std::io;
use std::net::SocketAddr;

use glommio::net::TcpListener;
use socket2::{Domain, Protocol, Socket, Type};

/// A bound client port.
#[derive(Debug)]
pub enum Port {
    /// Accepting connections (into the backlog until the accept loop runs).
    Listening(TcpListener),
    /// Bound without listening: connections are refused. Bound with
    /// `SO_REUSEPORT`, like glommio's listeners, so that the listener can
    /// be bound beside it before it is given up.
    Reserved(Socket),
}

impl Port {
    /// Binds `addr`, listening at once when `listen_now`.
    ///
    /// # Errors
    /// The socket's error (the address is in use, not local, …).
    pub fn bind(addr: SocketAddr, listen_now: bool) -> io::Result<Port> {
        if listen_now {
            return TcpListener::bind(addr)
                .map(Port::Listening)
                .map_err(io::Error::from);
        }
        let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
        socket.set_reuse_port(true)?;
        socket.bind(&addr.into())?;
        Ok(Port::Reserved(socket))
    }

    /// The bound address (with the port the kernel picked for port 0).
    ///
    /// # Errors
    /// The socket's error.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        match self {
            Port::Listening(listener) => listener.local_addr().map_err(io::Error::from),
            Port::Reserved(socket) => socket.local_addr()?.as_socket().ok_or_else(|| {
                io::Error::new(io::ErrorKind::InvalidData, "not an internet address")
            }),
        }
    }

    /// Starts listening: a reserved port binds its listener beside the
    /// reservation, then gives the reservation up.
    ///
    /// # Errors
    /// The listener's error.
    pub fn listen(self) -> io::Result<TcpListener> {
        match self {
            Port::Listening(listener) => Ok(listener),
            Port::Reserved(socket) => {
                let addr = Port::Reserved(socket.try_clone()?).local_addr()?;
                let listener = TcpListener::bind(addr).map_err(io::Error::from)?;
                drop(socket);
                Ok(listener)
            }
        }
    }
}
