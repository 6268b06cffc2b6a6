//! Communicators of processes started by torchrun or any launcher that sets the same variables.

use crate::comm::Communicator;
use crate::error::{Error, Result};
use crate::id::UniqueId;
use crate::runtime::Runtime;
use oxccl_core::config::{Env, Var, vars};

/// What the launcher said about this process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LaunchEnv {
    rank: usize,
    world_size: usize,
    local_rank: usize,
    /// Where every process finds the rendezvous root (started by rank 0).
    id: IdSource,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum IdSource {
    /// `OXCCL_UNIQUE_ID`: an id's hex text, made by the launcher.
    Given(String),
    /// `host:port` the root listens on.
    Address(String),
}

impl LaunchEnv {
    /// Reads `RANK`, `WORLD_SIZE`, `LOCAL_RANK` (default: `RANK`) and the rendezvous: the id in
    /// `OXCCL_UNIQUE_ID`, else `NCCL_COMM_ID`'s `host:port`, else `MASTER_ADDR` with
    /// `OXCCL_PORT`, or `MASTER_PORT + 1` (torchrun's store already listens on `MASTER_PORT`).
    ///
    /// The launcher's variables are required: a missing or bad one is an error naming it.
    pub(crate) fn read(env: Env<'_>) -> Result<LaunchEnv> {
        // The launcher's numbers: errors, not defaults, since nothing could stand in for them.
        let number = |var: &Var<Option<String>>| -> Result<Option<usize>> {
            env.get(var)
                .map(|v| {
                    v.trim().parse::<usize>().map_err(|_| {
                        Error::arg(format!("{}={v:?} is not a non-negative integer", var.name))
                    })
                })
                .transpose()
        };
        let need = |var: &Var<Option<String>>| -> Result<usize> {
            number(var)?.ok_or_else(|| {
                Error::arg(format!(
                    "{} is not set: start the processes with torchrun or set RANK, WORLD_SIZE, \
                     LOCAL_RANK, MASTER_ADDR and MASTER_PORT",
                    var.name
                ))
            })
        };
        let rank = need(&vars::RANK)?;
        let world_size = need(&vars::WORLD_SIZE)?;
        let local_rank = number(&vars::LOCAL_RANK)?.unwrap_or(rank);
        let id = if let Some(hex) = env.get(&vars::OXCCL_UNIQUE_ID) {
            IdSource::Given(hex)
        } else if let Some(addr) = env
            .get(&vars::NCCL_COMM_ID)
            .filter(|s| !s.trim().is_empty())
        {
            IdSource::Address(addr.trim().to_string())
        } else {
            let host = env.get(&vars::MASTER_ADDR).ok_or_else(|| {
                Error::arg("MASTER_ADDR is not set (nor OXCCL_UNIQUE_ID or NCCL_COMM_ID)")
            })?;
            let port = match env.get(&vars::OXCCL_PORT) {
                Some(p) => usize::from(p),
                None => need(&vars::MASTER_PORT)? + 1,
            };
            let port = u16::try_from(port)
                .map_err(|_| Error::arg(format!("rendezvous port {port} is not a TCP port")))?;
            let host = host.trim();
            // An IPv6 literal needs brackets before the port.
            let host = if host.contains(':') && !host.starts_with('[') {
                format!("[{host}]")
            } else {
                host.to_string()
            };
            IdSource::Address(format!("{host}:{port}"))
        };
        Ok(LaunchEnv {
            rank,
            world_size,
            local_rank,
            id,
        })
    }

    fn unique_id(&self) -> Result<UniqueId> {
        match &self.id {
            IdSource::Given(hex) => hex.parse(),
            IdSource::Address(a) => UniqueId::from_address(a),
        }
    }
}

impl Communicator {
    /// Joins the job a launcher started, on [`Runtime::auto`]'s backend: rank `RANK` of
    /// `WORLD_SIZE`, on device `LOCAL_RANK` (modulo the device count, so ranks may share
    /// devices), meeting at `MASTER_ADDR`. The port is `OXCCL_PORT`, or `MASTER_PORT + 1`
    /// because torchrun's own store listens on `MASTER_PORT`; `OXCCL_UNIQUE_ID` (an id's hex
    /// text) or `NCCL_COMM_ID` (`host:port`) replace that rendezvous. Every process of the job
    /// must call it.
    pub fn from_env() -> Result<Communicator> {
        Communicator::from_env_on(&Runtime::auto()?)
    }

    /// [`Communicator::from_env`] on `runtime`.
    pub fn from_env_on(runtime: &Runtime) -> Result<Communicator> {
        let env = LaunchEnv::read(Env::PROCESS)?;
        let device = runtime.device(env.local_rank % runtime.device_count()?.max(1))?;
        Communicator::init(&env.unique_id()?, env.rank, env.world_size, &device)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn read(vars: &[(&str, &str)]) -> Result<LaunchEnv> {
        let m: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        LaunchEnv::read(Env::from_fn(&|k| m.get(k).cloned()))
    }

    #[test]
    fn torchrun_variables() {
        let base = [
            ("RANK", "3"),
            ("WORLD_SIZE", "4"),
            ("LOCAL_RANK", "1"),
            ("MASTER_ADDR", "10.0.0.7"),
            ("MASTER_PORT", "29500"),
        ];
        let e = read(&base).unwrap();
        assert_eq!((e.rank, e.world_size, e.local_rank), (3, 4, 1));
        assert_eq!(e.id, IdSource::Address("10.0.0.7:29501".into()));
        let mut v = base.to_vec();
        v.push(("OXCCL_PORT", "4000"));
        assert_eq!(
            read(&v).unwrap().id,
            IdSource::Address("10.0.0.7:4000".into())
        );
        v.push(("NCCL_COMM_ID", "h:5"));
        assert_eq!(read(&v).unwrap().id, IdSource::Address("h:5".into()));
        let e = read(&[
            ("RANK", "0"),
            ("WORLD_SIZE", "2"),
            ("MASTER_ADDR", "::1"),
            ("MASTER_PORT", "7"),
        ])
        .unwrap();
        assert_eq!(e.local_rank, 0);
        assert_eq!(e.id, IdSource::Address("[::1]:8".into()));
    }

    #[test]
    fn missing_or_bad_variables_say_which() {
        let e = read(&[("WORLD_SIZE", "2")]).unwrap_err();
        assert!(e.to_string().contains("RANK is not set"), "{e}");
        let e = read(&[("RANK", "x"), ("WORLD_SIZE", "2")]).unwrap_err();
        assert!(e.to_string().contains("RANK=\"x\""), "{e}");
        let e = read(&[("RANK", "0"), ("WORLD_SIZE", "2"), ("MASTER_PORT", "1")]).unwrap_err();
        assert!(e.to_string().contains("MASTER_ADDR"), "{e}");
        let e = read(&[
            ("RANK", "0"),
            ("WORLD_SIZE", "2"),
            ("MASTER_ADDR", "h"),
            ("MASTER_PORT", "65535"),
        ])
        .unwrap_err();
        assert!(e.to_string().contains("65536"), "{e}");
    }
}
