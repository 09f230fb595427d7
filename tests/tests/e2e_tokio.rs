//! The end-to-end suite against the tokio driver.

mod e2e;

use std::net::SocketAddr;
use std::path::Path;

use mew_core::gateway::SpaceConfig;
use mew_tokio::{GatewayServer, ServerOptions};

struct Tokio;

impl e2e::Driver for Tokio {
    fn start_on(config: SpaceConfig, base_dir: &Path, addr: SocketAddr) -> e2e::RunningGateway {
        let base_dir = base_dir.to_owned();
        let (tx, rx) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let opts = ServerOptions {
                    base_dir,
                    seed: Some(7),
                    ..ServerOptions::default()
                };
                let server = GatewayServer::bind_with(addr, config, opts).await.unwrap();
                tx.send((server.local_addr(), server.shutdown_handle()))
                    .unwrap();
                server.serve().await.unwrap();
            });
        });
        let (addr, handle) = rx.recv().unwrap();
        e2e::RunningGateway::new(
            addr,
            Box::new(move || {
                handle.shutdown();
                thread.join().unwrap();
            }),
        )
    }
}

e2e_suite!(Tokio:
    join_by_header,
    join_by_reference_messages,
    welcome_and_presence,
    chat_fan_out,
    capability_violation,
    proposal_fulfilled_by_another_participant,
    grant_then_direct_request,
    pause_enforced,
    kick,
    streams_with_frames,
    http_injection_and_polling,
    slow_consumer_is_closed,
    oversize_frame,
    garbage_frames,
    graceful_shutdown,
    audit_and_virtual_logs,
    runtime_reconnects,
);
