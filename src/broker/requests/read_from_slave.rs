//! Reads from the slave (seed 001 §2.3, reference part 2 §5.4): which broker a pull's
//! answer sends the consumer to next (`suggestWhichBrokerId`), and what a slave answers
//! for an offset it does not hold yet.
//!
//! - **Where to read next.** With `slaveReadEnable`, an answer carrying records whose last
//!   one lies further behind the log's end than the memory window
//!   (`accessMessageInMemoryMaxRatio`, [`crate::store::Store::beyond_memory_window`])
//!   suggests the group's `whichBrokerWhenConsumeSlowly` (1, the first slave, by default):
//!   a consumer that far behind reads from disk, and the slave's disk serves it as well as
//!   the master's. Every other answer suggests the master (0). A slave applies the same
//!   rule, so it sends a consumer back to its master as soon as the consumer reads warm
//!   data or finds nothing. Java's client looks the suggested id up in the route and falls
//!   back to any broker of the group it finds, so with the master gone (not in the route)
//!   consumers stay on the slave whatever it suggests: that is how they keep reading when
//!   the master is down, with or without `slaveReadEnable`.
//! - **A slave never moves an offset forward.** A slave may be behind its master (an
//!   ASYNC_MASTER's slave, a slave catching up), so a consumer can ask it for an offset
//!   past its end that the master holds. Java's slave answers PULL_RETRY_IMMEDIATELY there
//!   (`offsetCheckInSlave` off), which spins a client whose master is gone; ringmq's slave
//!   answers PULL_NOT_FOUND at the consumer's own offset, which the client long-polls,
//!   woken when replication brings the queue that far. PULL_OFFSET_MOVED from a slave only
//!   ever moves a consumer forward past records the slave's retention removed, as the
//!   master's would.

use crate::broker::Broker;
use crate::remoting::codes::response;

/// Java's `MixAll.MASTER_ID`: the broker id of a group's master.
pub const MASTER_ID: i64 = 0;

/// The `suggestWhichBrokerId` of a pull answer of `group` whose last record (if it
/// carries any) starts at `last_record`.
pub fn suggested_broker(broker: &Broker, group: &str, last_record: Option<u64>) -> i64 {
    if !broker.config.slave_read_enable {
        return MASTER_ID;
    }
    let Some(position) = last_record else {
        return MASTER_ID;
    };
    if !broker.store().beyond_memory_window(position) {
        return MASTER_ID;
    }
    broker
        .subscription_groups
        .get(group)
        .map_or(1, |config| config.which_broker_when_consume_slowly)
}

/// A read's answer `(code, nextBeginOffset)` as a slave gives it: a move to `max_offset`
/// or to 0 for an `offset` past what the slave holds becomes PULL_NOT_FOUND at `offset`.
pub fn on_slave(code: i32, next: u64, offset: u64, max_offset: u64) -> (i32, u64) {
    if code == response::PULL_OFFSET_MOVED && offset > max_offset {
        return (response::PULL_NOT_FOUND, offset);
    }
    (code, next)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slave_keeps_an_offset_past_its_end() {
        // Past the end (the master holds more): wait there, never move back.
        assert_eq!(
            on_slave(response::PULL_OFFSET_MOVED, 10, 15, 10),
            (response::PULL_NOT_FOUND, 15)
        );
        // An empty queue on the slave, asked for offset 7: wait at 7, not move to 0.
        assert_eq!(
            on_slave(response::PULL_OFFSET_MOVED, 0, 7, 0),
            (response::PULL_NOT_FOUND, 7)
        );
    }

    #[test]
    fn a_slave_moves_an_offset_below_its_retention_as_the_master_does() {
        assert_eq!(
            on_slave(response::PULL_OFFSET_MOVED, 5, 2, 9),
            (response::PULL_OFFSET_MOVED, 5)
        );
        assert_eq!(
            on_slave(response::SUCCESS, 12, 10, 20),
            (response::SUCCESS, 12)
        );
        assert_eq!(
            on_slave(response::PULL_NOT_FOUND, 20, 20, 20),
            (response::PULL_NOT_FOUND, 20)
        );
    }
}
