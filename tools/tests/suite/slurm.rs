//! The tester under a real single-node Slurm: the test starts `munged`, `slurmctld` and `slurmd`
//! (Debian's `munge` and `slurm-wlm` packages, which `scripts/setup.sh` installs) with a
//! generated `slurm.conf` in a scratch directory, runs `srun -n 4 all_reduce_test …`, and stops
//! the daemons. The ranks learn their place from `SLURM_PROCID`, `SLURM_NTASKS`,
//! `SLURM_LOCALID` and `SLURM_STEP_TASKS_PER_NODE`, and meet on the first host of
//! `SLURM_STEP_NODELIST`; nothing else is set. Needs root (slurmd starts tasks as any user).

use std::net::ToSocketAddrs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::common;
use crate::common::{lease_port, stderr, stdout, table, PortLease, LAUNCHER_VARS};

const DAEMONS: [&str; 4] = ["munged", "slurmctld", "slurmd", "srun"];

fn found(prog: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|p| {
        std::env::split_paths(&p)
            .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/sbin")])
            .any(|d| d.join(prog).is_file())
    })
}

fn sbin(prog: &str) -> PathBuf {
    ["/usr/sbin", "/sbin", "/usr/bin"]
        .iter()
        .map(|d| Path::new(d).join(prog))
        .find(|p| p.is_file())
        .unwrap_or_else(|| PathBuf::from(prog))
}

/// The daemons of one test cluster; stopped (killed by pid, then reaped) on drop.
struct Cluster {
    dir: PathBuf,
    conf: PathBuf,
    children: Vec<(&'static str, Child)>,
    _ports: [PortLease; 2],
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for (_, c) in self.children.iter_mut().rev() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Cluster {
    fn log(&self) -> String {
        let mut s = String::new();
        for f in ["munged.log", "slurmctld.log", "slurmd.log"] {
            let text = std::fs::read_to_string(self.dir.join(f)).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(15).collect();
            s.push_str(&format!("--- {f}\n"));
            for l in tail.iter().rev() {
                s.push_str(l);
                s.push('\n');
            }
        }
        s
    }

    fn command(&self, prog: &str) -> Command {
        let mut c = Command::new(sbin(prog));
        // Only this cluster: no variables of a surrounding job or launcher.
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("SLURM_") {
                c.env_remove(k);
            }
        }
        for v in LAUNCHER_VARS {
            c.env_remove(v);
        }
        c.env("SLURM_CONF", &self.conf);
        c
    }

    fn spawn(&mut self, name: &'static str, mut c: Command) {
        let child = c
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name}: {e}"));
        self.children.push((name, child));
    }

    /// Starts the daemons and waits until the node is idle.
    fn start(node: &str) -> Cluster {
        let dir = std::env::temp_dir().join(format!("hccl-slurm-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for sub in ["state", "spool"] {
            std::fs::create_dir_all(dir.join(sub)).expect("scratch dir");
        }
        let mut key = vec![0u8; 1024];
        std::io::Read::read_exact(
            &mut std::fs::File::open("/dev/urandom").expect("/dev/urandom"),
            &mut key,
        )
        .expect("random key");
        let key_path = dir.join("munge.key");
        std::fs::write(&key_path, key).expect("munge key");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&key_path, std::fs::Permissions::from_mode(0o400))
            .expect("key mode");
        let ports = [lease_port(), lease_port()];
        let d = dir.display();
        let conf = dir.join("slurm.conf");
        let text = format!(
            "ClusterName=hcclrs\n\
             SlurmctldHost={node}(127.0.0.1)\n\
             SlurmctldPort={}\nSlurmdPort={}\n\
             AuthType=auth/munge\nCredType=cred/munge\nAuthInfo=socket={d}/munge.sock\n\
             SlurmUser=root\nSlurmdUser=root\n\
             StateSaveLocation={d}/state\nSlurmdSpoolDir={d}/spool\n\
             SlurmctldPidFile={d}/slurmctld.pid\nSlurmdPidFile={d}/slurmd.pid\n\
             SlurmctldLogFile={d}/slurmctld.log\nSlurmdLogFile={d}/slurmd.log\n\
             ProctrackType=proctrack/pgid\nTaskPlugin=task/none\nMpiDefault=none\n\
             ReturnToService=2\nSchedulerType=sched/builtin\n\
             SelectType=select/cons_tres\nSelectTypeParameters=CR_Core\n\
             JobCompType=jobcomp/none\nAccountingStorageType=accounting_storage/none\n\
             JobAcctGatherType=jobacct_gather/none\n\
             SlurmdParameters=config_overrides\n\
             NodeName={node} NodeAddr=127.0.0.1 CPUs=8 State=UNKNOWN\n\
             PartitionName=hccl Nodes={node} Default=YES MaxTime=10 State=UP\n",
            ports[0].port, ports[1].port
        );
        std::fs::write(&conf, text).expect("slurm.conf");
        let mut cl = Cluster {
            dir: dir.clone(),
            conf,
            children: Vec::new(),
            _ports: ports,
        };
        let mut munged = cl.command("munged");
        munged.arg("--force").arg("--foreground").args([
            format!("--socket={d}/munge.sock"),
            format!("--key-file={d}/munge.key"),
            format!("--pid-file={d}/munged.pid"),
            format!("--log-file={d}/munged.log"),
            format!("--seed-file={d}/munged.seed"),
        ]);
        cl.spawn("munged", munged);
        let mut ctld = cl.command("slurmctld");
        ctld.args(["-D", "-i"]);
        cl.spawn("slurmctld", ctld);
        let mut slurmd = cl.command("slurmd");
        slurmd.args(["-D", "-N", node]);
        cl.spawn("slurmd", slurmd);
        // The daemons are other programs: their readiness can only be polled.
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let exited = cl
                .children
                .iter_mut()
                .find_map(|(name, c)| c.try_wait().ok().flatten().map(|st| (*name, st)));
            if let Some((name, st)) = exited {
                panic!("{name} exited ({st}) while starting:\n{}", cl.log());
            }
            let o = cl
                .command("sinfo")
                .args(["-h", "-o", "%T"])
                .output()
                .expect("sinfo runs");
            if String::from_utf8_lossy(&o.stdout).trim() == "idle" {
                return cl;
            }
            assert!(
                Instant::now() < deadline,
                "the node did not become idle within 60 s:\n{}{}",
                String::from_utf8_lossy(&o.stderr),
                cl.log()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn srun(&self, args: &[&str]) -> Output {
        self.command("srun")
            .args(["--time=5", "--kill-on-bad-exit=1"])
            .args(args)
            .env("HCCL_CONNECT_TIMEOUT", "60")
            .env("HCCL_EXEC_TIMEOUT", "60")
            .output()
            .expect("srun runs")
    }
}

/// This host's name when it resolves (what a real cluster's node names are), else `localhost`.
fn node_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most buf.len() bytes into a buffer we own.
    let ok = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } == 0;
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    let name = if ok {
        let full = String::from_utf8_lossy(&buf[..end]);
        full.split('.').next().unwrap_or("").to_string()
    } else {
        String::new()
    };
    if !name.is_empty() && (name.as_str(), 0).to_socket_addrs().is_ok() {
        name
    } else {
        "localhost".into()
    }
}

#[test]
fn all_reduce_test_under_srun() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        common::skip::skip("slurmd must run as root to start tasks");
        return;
    }
    if let Some(missing) = DAEMONS.iter().find(|p| !found(p)) {
        common::skip::skip_unless_ci(&format!(
            "{missing} not found (scripts/setup.sh installs slurmd, slurmctld, slurm-client \
             and munge)"
        ));
        return;
    }
    let cluster = Cluster::start(&node_name());
    let o = cluster.srun(&[
        "-n",
        "4",
        env!("CARGO_BIN_EXE_all_reduce_test"),
        "-b",
        "8",
        "-e",
        "64K",
        "-f",
        "8",
        "-n",
        "3",
        "-w",
        "1",
    ]);
    let (out, err) = (stdout(&o), stderr(&o));
    assert!(
        o.status.success(),
        "srun failed ({}):\n{out}\n{err}\n{}",
        o.status,
        cluster.log()
    );
    let rows = table(&out);
    assert_eq!(rows.len(), 5, "{out}\n{err}");
    for r in &rows {
        assert_eq!(r.check, "success", "{r:?}\n{out}");
    }
    // Rank 0 alone prints, and names the launcher it found.
    assert_eq!(out.matches("data_size(Bytes)").count(), 1, "{out}");
    // The summary line goes to stderr.
    assert!(err.contains("4 processes (slurm)"), "{out}\n{err}");
}
