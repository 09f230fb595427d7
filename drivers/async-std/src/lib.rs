//! MEW gateway server and participant runtime on async-std.
