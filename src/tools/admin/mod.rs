//! `ringmq admin`: an mqadmin-like tool that speaks the remoting protocol to a running
//! node (or any RocketMQ name server and broker): cluster and broker status, topics,
//! consumer groups (their configs, progress and connections), finding messages, resetting
//! offsets. mqadmin's habits carry over: `-n` or `NAMESRV_ADDR`, its short flags, `-c` to
//! act on every master of a cluster.
//!
//! - [`args`]: the command line (clap); [`arg_error`]: why an option's value is refused.
//! - [`commands`]: one function per command: argument checks, calls, output.
//! - [`wire`]: connections, bounded by `--timeout`, what response codes mean, and naming
//!   an address that is the wrong thing (a broker given as the name server, an HTTP port).
//! - [`ha_body`]: the reader of GET_BROKER_HA_STATUS's `HARuntimeInfo`.
//! - [`bodies`]: typed readers of the response bodies, through the codec's JSON reader
//!   ([`crate::remoting::fastjson`]), which accepts RocketMQ's object and integer map keys;
//!   [`body_error`]: which body could not be read and why.
//! - [`message`]: stored records decoded into what the query commands print.
//! - [`output`]: tables, `key: value` blocks and the JSON form; [`time`]: timestamps in
//!   and out.
//! - [`error`]: the error kinds and their exit codes (0 done, 1 not found, 2 bad input,
//!   3 the node failed or could not be reached).
//!
//! Errors go to stderr as one line; stdout carries only the result.

pub mod arg_error;
pub mod args;
pub mod bodies;
pub mod body_error;
pub mod commands;
pub mod error;
pub mod ha_body;
pub mod message;
pub mod output;
pub mod time;
pub mod wire;

use std::process::ExitCode;

use args::AdminArgs;
use error::AdminError;

/// The error as one line on stderr, its control characters escaped by [`output::human`].
fn report(error: &AdminError) {
    eprintln!("ringmq admin: {}", output::human(&error.to_string()));
}

/// Runs `ringmq admin` and returns its exit code.
pub fn run(args: AdminArgs) -> ExitCode {
    let ctx = commands::Ctx::new(&args);
    match wire::block_on(commands::dispatch(&ctx, &args.command)) {
        Ok(output) => {
            output.print(args.json);
            match &output.failure {
                Some(failure) => {
                    report(failure);
                    failure.to_exit_code()
                }
                None => ExitCode::SUCCESS,
            }
        }
        Err(error) => {
            report(&error);
            error.to_exit_code()
        }
    }
}
