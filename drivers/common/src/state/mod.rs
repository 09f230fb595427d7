//! A space's durable state and files: the durable single node ([`durable`]: recovery, the
//! log's flushing thread, the core task that holds outputs until what they depend on is on
//! disk), the log writer of audit records and virtual participants ([`logs`]), appends that
//! go around the page cache ([`direct`]), and where a space's files go ([`files`]).

pub mod direct;
pub mod durable;
pub mod files;
pub mod logs;
