//! Interop between the drivers: each driver's participant runtime on the other's gateway.
//! (The raw clients of every suite are tokio-tungstenite, so the async-std gateway's suite
//! already has tokio clients on it; these run the participant runtimes across.)

use crate::e2e;

use e2e::Mixed;
use e2e::drivers::{AsyncStd, Tokio};

mod tokio_participant_on_async_std_gateway {
    use super::*;
    e2e_suite!(Mixed<AsyncStd, Tokio>:
        proposal_fulfilled_by_another_participant,
        runtime_reconnects,
    );
}

mod async_std_participant_on_tokio_gateway {
    use super::*;
    e2e_suite!(Mixed<Tokio, AsyncStd>:
        proposal_fulfilled_by_another_participant,
        runtime_reconnects,
    );
}
