//! Participant state machines: the client connection (SDK layer 1) and the participant
//! (SDK layer 2).
