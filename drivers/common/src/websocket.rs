//! WebSocket settings both sides of a gateway connection use: the gateway's server and every
//! client runtime refuse frames and messages over the same limit, with small buffers.

use tungstenite::protocol::WebSocketConfig;

/// Bytes read from a socket at a time.
pub const READ_BUFFER: usize = 16 * 1024;
/// Bytes of frames gathered before they are written to the socket.
pub const WRITE_BUFFER: usize = 16 * 1024;

/// WebSocket settings that refuse frames and messages over `max` bytes.
pub fn ws_config(max: usize) -> WebSocketConfig {
    // tungstenite zero-fills a read buffer of this size before every socket read: the
    // 128 KiB default costs a large memset per read and per idle connection's memory.
    // Its write buffer keeps the largest size it ever reached (up to 128 KiB by default):
    // after one burst, every idle connection would hold that much.
    WebSocketConfig::default()
        .read_buffer_size(READ_BUFFER)
        .write_buffer_size(WRITE_BUFFER)
        .max_frame_size(Some(max))
        .max_message_size(Some(max))
}
