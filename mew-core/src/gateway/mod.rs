//! The gateway's space state machine (connections, enforcement, delivery, space operations).
