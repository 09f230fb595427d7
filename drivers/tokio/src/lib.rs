//! MEW gateway server and participant runtime on tokio.
