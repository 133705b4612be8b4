//! Delay levels as a shard service ([`crate::shard::service`]): the retention hold of the
//! `SCHEDULE_TOPIC_XXXX` queues this shard owns, and one scheduler task per level whose
//! queue it owns. Nothing to do at stop: the cursors are node-wide and written by the node
//! once every shard stopped.

use std::rc::Rc;

use crate::broker::Broker;
use crate::shard::service::{ShardService, ShardTask};

struct DelayService {
    broker: Rc<Broker>,
}

/// Opens delay levels on `broker`'s shard.
pub fn open(broker: &Rc<Broker>) -> anyhow::Result<Rc<dyn ShardService>> {
    super::holds::hold(broker);
    Ok(Rc::new(DelayService {
        broker: broker.clone(),
    }))
}

impl ShardService for DelayService {
    fn name(&self) -> &'static str {
        "delay levels"
    }

    fn tasks(&self) -> Vec<ShardTask> {
        let shard = self.broker.shard();
        super::levels_on_shard(&self.broker.config.delay_levels, shard.id(), shard.count())
            .into_iter()
            .map(|level| {
                ShardTask::new(
                    "delay scheduler",
                    super::scheduler::run_level(self.broker.clone(), level),
                )
            })
            .collect()
    }
}
