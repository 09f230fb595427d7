//! The drivers under test: each starts its gateway server on a thread of its own, inside
//! the runtime an application of that driver would use.

use std::net::SocketAddr;

use mew_core::gateway::SpaceConfig;

use mew_driver_common::server::ServerOptions;

use super::{Driver, RunningGateway};

/// The tokio driver (`mew-tokio`).
pub struct Tokio;

impl Driver for Tokio {
    type Rt = mew_tokio::Tokio;

    fn start_with(config: SpaceConfig, addr: SocketAddr, opts: ServerOptions) -> RunningGateway {
        let (tx, rx) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let server = mew_tokio::GatewayServer::bind_with(addr, config, opts)
                    .await
                    .unwrap();
                tx.send((
                    server.local_addr(),
                    server.shutdown_handle(),
                    server.reload_handle(),
                ))
                .unwrap();
                server.serve().await.unwrap();
            });
        });
        let (addr, handle, reload) = rx.recv().unwrap();
        let mut gw = RunningGateway::new(
            addr,
            Box::new(move || {
                handle.shutdown();
                thread.join().unwrap();
            }),
        );
        gw.reload = Some(reload);
        gw
    }
}

/// The async-std / smol driver (`mew-async-std`), served under `async_std::task::block_on`.
pub struct AsyncStd;

impl Driver for AsyncStd {
    type Rt = mew_async_std::AsyncStd;

    fn start_with(config: SpaceConfig, addr: SocketAddr, opts: ServerOptions) -> RunningGateway {
        let (tx, rx) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            async_std::task::block_on(async move {
                let server = mew_async_std::GatewayServer::bind_with(addr, config, opts)
                    .await
                    .unwrap();
                tx.send((
                    server.local_addr(),
                    server.shutdown_handle(),
                    server.reload_handle(),
                ))
                .unwrap();
                server.serve().await.unwrap();
            });
        });
        let (addr, handle, reload) = rx.recv().unwrap();
        let mut gw = RunningGateway::new(
            addr,
            Box::new(move || {
                handle.shutdown();
                thread.join().unwrap();
            }),
        );
        gw.reload = Some(reload);
        gw
    }
}
