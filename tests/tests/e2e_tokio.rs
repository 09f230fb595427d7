//! The end-to-end suite against the tokio driver.

mod e2e;

use e2e::drivers::Tokio;

e2e_all!(Tokio);
