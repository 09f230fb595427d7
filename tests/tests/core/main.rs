//! The core's state machines driven directly: the gateway's rules (joins, enforcement,
//! operations, HTTP, streams) and the participant's (chat, controls, discovery, proposals,
//! requests, tools), with property tests.

#[path = "../support/mod.rs"]
mod support;

mod gateway_enforce;
mod gateway_http;
mod gateway_join;
mod gateway_model;
mod gateway_ops;
mod gateway_props;
mod gateway_screens;
mod gateway_streams;
mod participant_chat;
mod participant_controls;
mod participant_discovery;
mod participant_proposals;
mod participant_props;
mod participant_requests;
mod participant_tools;
