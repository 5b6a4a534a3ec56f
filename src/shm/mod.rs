//! The shared zone: one per context (http, stream), holding a header and one
//! fixed-size slot per checked peer.
//!
//! Only plain data lives here: atomics and integers, no pointers. Every
//! field is an atomic so that workers, the status page and the selection
//! hooks read it without locks; a dead worker can never leave a lock held.
//!
//! The zone is created with `noreuse`, so every configuration load maps a
//! fresh zone and `init` receives the previous zone's data: state is carried
//! across reloads by peer identity, whatever the new size or peer order.

mod init;
mod restore;
mod zone;

pub use healthcheck_core::zone::Slot;
pub use init::{register, ZonePlan};
pub use zone::{required_size, Zone};
