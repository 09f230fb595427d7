//! The end-to-end suite against the async-std / smol driver.

use crate::e2e;

use e2e::drivers::AsyncStd;

e2e_all!(AsyncStd);
