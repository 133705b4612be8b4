//! Timer messages as a shard service ([`crate::shard::service`]): opens the shard's timer
//! store (`<store dir>/timer`), refuses a checkpoint that claims more of the timer queue
//! than the queue holds, holds the timer queue against retention, runs the scheduler when
//! `timerWheelEnable` is on, and checkpoints at stop (after the scheduler stopped, so what
//! it acknowledged is not delivered again).
//!
//! On a slave the store opens too (its state can be read, and its hold keeps the timer
//! queue), but the node runs none of the engines' tasks, so the scheduler never runs; the
//! checkpoint file is the copy of the master's the metadata sync writes under it
//! ([`super::copy`]), and the stop writes nothing: the store's memory, the state it opened
//! with, would overwrite that copy.

use std::rc::Rc;
use std::sync::Arc;

use super::scheduler::Timers;
use crate::broker::Broker;
use crate::shard::service::{LocalFuture, ShardService, ShardTask};
use crate::store::replica::StoreRole;

struct TimerService {
    broker: Rc<Broker>,
    timers: Rc<Timers>,
}

/// Opens the timer store of `broker`'s shard and hands it to the broker.
pub fn open(broker: &Rc<Broker>) -> anyhow::Result<Rc<dyn ShardService>> {
    let shard = broker.shard();
    let store = broker.store();
    let queue = super::queue_of_shard(shard.id(), shard.count());
    let timers = Timers::open(
        Arc::new(crate::io::meta::RealFiles),
        &store.config().dir,
        queue,
        broker.config.timer_limits,
    )?;
    timers.check_against_queue(store.max_offset(super::TIMER_TOPIC, queue))?;
    let timers = Rc::new(timers);
    super::holds::hold(store, &timers);
    broker.set_timers(timers.clone());
    Ok(Rc::new(TimerService {
        broker: broker.clone(),
        timers,
    }))
}

impl ShardService for TimerService {
    fn name(&self) -> &'static str {
        "timers"
    }

    fn tasks(&self) -> Vec<ShardTask> {
        if !self.broker.config.timer_enabled {
            return Vec::new();
        }
        vec![ShardTask::new(
            "timer scheduler",
            super::scheduler::run(self.broker.clone(), self.timers.clone()),
        )]
    }

    fn stop(&self) -> LocalFuture<()> {
        if self.broker.store().role() == StoreRole::Replica {
            return Box::pin(async {});
        }
        if let Err(error) = self.timers.checkpoint() {
            let shard = self.broker.shard().id();
            tracing::error!(shard, "cannot checkpoint the timer store: {error}");
        }
        Box::pin(async {})
    }
}
