//! Transactions as a shard service ([`crate::shard::service`]): opens the shard's state
//! (replaying op records from the check cursor), holds the half queue against retention,
//! and runs the check service on a master. A slave runs nothing: it decides nothing, and
//! its cursor is the copy of its master's.

use std::rc::Rc;

use super::Transactions;
use crate::broker::Broker;
use crate::shard::routing::queue_of_shard;
use crate::shard::service::{ShardService, ShardTask};

use super::halves::{HALF_TOPIC, OP_TOPIC};

struct TransactionService {
    broker: Rc<Broker>,
    transactions: Rc<Transactions>,
}

/// Opens the transaction state of `broker`'s shard and hands it to the broker.
pub fn open(broker: &Rc<Broker>) -> anyhow::Result<Rc<dyn ShardService>> {
    let shard = broker.shard();
    let half_queue = queue_of_shard(HALF_TOPIC, shard.id(), shard.count());
    let op_queue = queue_of_shard(OP_TOPIC, shard.id(), shard.count());
    let transactions = Transactions::open(broker, half_queue, op_queue)
        .map_err(|error| anyhow::anyhow!("cannot open the transaction state: {error}"))?;
    if transactions.pending() > 0 {
        tracing::info!(
            shard = shard.id(),
            pending = transactions.pending(),
            cursor = transactions.cursor(),
            "undecided half messages found: the check service will ask their producers"
        );
    }
    let transactions = Rc::new(transactions);
    super::holds::hold(broker.store(), broker.consumer_offsets.clone(), half_queue);
    broker.set_transactions(transactions.clone());
    Ok(Rc::new(TransactionService {
        broker: broker.clone(),
        transactions,
    }))
}

impl ShardService for TransactionService {
    fn name(&self) -> &'static str {
        "transactions"
    }

    fn tasks(&self) -> Vec<ShardTask> {
        vec![ShardTask::new(
            "transaction check",
            super::check::run(self.broker.clone(), self.transactions.clone()),
        )]
    }
}
