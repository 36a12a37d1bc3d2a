//! The plugin in one process through its C entry points: several comms driven from several
//! threads at once, each pair checking every byte it receives.

mod common;

use common::{collect, LOG};
use hccl_net_ofi::abi::{code, NetHandle, NetProperties, PluginV1, HANDLE_BYTES};
use std::ffi::{c_int, c_void};
use std::ptr::null_mut;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Hang guard only; every wait normally ends in milliseconds.
const DEADLINE: Duration = Duration::from_secs(120);

fn plugin() -> &'static PluginV1 {
    static P: OnceLock<&'static PluginV1> = OnceLock::new();
    P.get_or_init(|| {
        // SAFETY: the entry point returns a pointer to a static table.
        let p = unsafe { &*hccl_net_ofi::hcclNetPluginV1() };
        // SAFETY: NULL config and a valid callback.
        let rc = unsafe { (p.init)(std::ptr::null(), Some(collect), null_mut()) };
        assert_eq!(rc, code::SUCCESS, "init: {:?}", LOG.lock().unwrap());
        p
    })
}

#[derive(Clone, Copy)]
struct H(*mut c_void);
// SAFETY: plugin handles are numbers usable from any thread.
unsafe impl Send for H {}

/// Waits for several requests in one loop: each comm progresses only inside calls on it, so a
/// send may need its receiving comm to be tested meanwhile (rendezvous of large messages).
fn wait_all(p: &PluginV1, reqs: &[H]) -> Vec<(c_int, usize)> {
    let end = Instant::now() + DEADLINE;
    let mut res: Vec<Option<(c_int, usize)>> = vec![None; reqs.len()];
    while res.iter().any(Option::is_none) {
        assert!(
            Instant::now() < end,
            "requests did not finish within {DEADLINE:?}"
        );
        for (r, slot) in reqs.iter().zip(res.iter_mut()) {
            if slot.is_none() {
                let (mut done, mut bytes) = (0, 0usize);
                // SAFETY: valid out-pointers.
                let rc = unsafe { (p.test)(r.0, &mut done, &mut bytes) };
                if rc != code::SUCCESS || done == 1 {
                    *slot = Some((rc, bytes));
                }
            }
        }
    }
    res.into_iter().map(|r| r.expect("finished")).collect()
}

fn post(mut f: impl FnMut(&mut *mut c_void) -> c_int) -> H {
    let end = Instant::now() + DEADLINE;
    let mut req = null_mut();
    loop {
        let rc = f(&mut req);
        if rc == code::SUCCESS {
            return H(req);
        }
        assert_eq!(rc, code::AGAIN, "post failed");
        assert!(Instant::now() < end, "post kept answering AGAIN");
    }
}

/// A connected pair (listener side, connector side), both comms of device 0.
fn pair(p: &PluginV1) -> (H, H) {
    let mut handle = NetHandle {
        bytes: [0; HANDLE_BYTES],
    };
    let mut lc = null_mut();
    // SAFETY: valid out-pointers.
    assert_eq!(
        unsafe { (p.listen)(0, &mut handle, &mut lc) },
        code::SUCCESS
    );
    let mut conn = null_mut();
    // SAFETY: handle from listen.
    assert_eq!(unsafe { (p.connect)(0, &handle, &mut conn) }, code::SUCCESS);
    let (mut acc, mut connected): (*mut c_void, c_int) = (null_mut(), 0);
    let end = Instant::now() + DEADLINE;
    // One loop polls both sides, as a caller that connects and accepts must.
    while acc.is_null() || connected == 0 {
        assert!(Instant::now() < end, "handshake did not finish");
        if acc.is_null() {
            // SAFETY: valid out-pointer.
            assert_eq!(unsafe { (p.accept)(lc, &mut acc) }, code::SUCCESS);
        }
        // SAFETY: valid out-pointer.
        assert_eq!(
            unsafe { (p.connect_test)(conn, &mut connected) },
            code::SUCCESS
        );
    }
    // SAFETY: lc from listen.
    assert_eq!(unsafe { (p.close_listen)(lc) }, code::SUCCESS);
    (H(acc), H(conn))
}

fn byte(pair: usize, dir: usize, round: usize, i: usize) -> u8 {
    (i.wrapping_mul(31) ^ (pair * 7 + dir * 3 + round * 11) ^ (i >> 9)) as u8
}

/// The largest message of device 0.
fn max_message(p: &PluginV1) -> usize {
    // SAFETY: all-zero is a valid NetProperties (integers and byte arrays).
    let mut props: NetProperties = unsafe { std::mem::zeroed() };
    // SAFETY: valid out-pointer.
    assert_eq!(unsafe { (p.get_properties)(0, &mut props) }, code::SUCCESS);
    props.max_message_bytes.min(usize::MAX as u64) as usize
}

/// Sends `rounds` messages of growing size (up to 300 000 bytes or the device's largest message)
/// from `a` to `b` and back, checking each byte.
fn ping_pong(p: &PluginV1, id: usize, a: H, b: H, rounds: usize) {
    let limit = max_message(p).min(300_000);
    for r in 0..rounds {
        let size = 1 + r * 97_003 % limit;
        for (dir, (from, to)) in [(a, b), (b, a)].into_iter().enumerate() {
            let out: Vec<u8> = (0..size).map(|i| byte(id, dir, r, i)).collect();
            let mut inb = vec![0u8; size];
            let tag = (r * 2 + dir) as u32;
            // SAFETY: buffers live until the requests finish (waited below).
            let rr = post(|q| unsafe {
                (p.irecv)(to.0, inb.as_mut_ptr().cast(), size, tag, null_mut(), q)
            });
            // SAFETY: as above.
            let rs = post(|q| unsafe {
                (p.isend)(from.0, out.as_ptr().cast(), size, tag, null_mut(), q)
            });
            assert_eq!(wait_all(p, &[rs, rr]), [(code::SUCCESS, size); 2]);
            assert!(
                inb == out,
                "pair {id} round {r} direction {dir}: data differs"
            );
        }
    }
}

#[test]
fn four_pairs_from_four_threads() {
    let p = plugin();
    let pairs: Vec<(H, H)> = (0..4).map(|_| pair(p)).collect();
    std::thread::scope(|s| {
        for (id, &(a, b)) in pairs.iter().enumerate() {
            s.spawn(move || ping_pong(p, id, a, b, 12));
        }
    });
    for (a, b) in pairs {
        // SAFETY: comms from pair().
        unsafe {
            assert_eq!((p.close_comm)(a.0), code::SUCCESS);
            assert_eq!((p.close_comm)(b.0), code::SUCCESS);
        }
    }
}

#[test]
fn log_names_provider_and_fabric_at_info() {
    plugin();
    let log = LOG.lock().unwrap();
    assert!(
        log.iter()
            .any(|l| l.contains("provider ") && l.contains("fabric ")),
        "{log:?}"
    );
}

#[test]
fn deregistering_while_a_receive_is_posted_is_safe() {
    let p = plugin();
    let (a, b) = pair(p);
    let mut inb = vec![0u8; 4096];
    let out: Vec<u8> = (0..4096).map(|i| (i % 251) as u8).collect();
    let mut mh = null_mut();
    // SAFETY: inb outlives the registration's use below.
    assert_eq!(
        unsafe { (p.reg_mr)(b.0, inb.as_mut_ptr().cast(), inb.len(), &mut mh) },
        code::SUCCESS
    );
    // SAFETY: as above.
    let rr = post(|q| unsafe { (p.irecv)(b.0, inb.as_mut_ptr().cast(), 4096, 5, mh, q) });
    // The registration outlives its handle until the receive completes.
    // SAFETY: mh from reg_mr.
    assert_eq!(unsafe { (p.dereg_mr)(mh) }, code::SUCCESS);
    // SAFETY: out lives until the send finishes.
    let rs = post(|q| unsafe { (p.isend)(a.0, out.as_ptr().cast(), 4096, 5, null_mut(), q) });
    assert_eq!(wait_all(p, &[rs, rr]), [(code::SUCCESS, 4096); 2]);
    assert_eq!(inb, out);
    // SAFETY: comms from pair().
    unsafe {
        (p.close_comm)(a.0);
        (p.close_comm)(b.0);
    }
}

/// Asks `comm` for its wait descriptor until the plugin has nothing left to report first.
fn wait_fd(p: &PluginV1, comm: H) -> c_int {
    let end = Instant::now() + DEADLINE;
    loop {
        let mut fd: c_int = -1;
        // SAFETY: valid out-pointer.
        match unsafe { (p.wait_fd)(comm.0, &mut fd) } {
            code::SUCCESS => {
                assert!(fd >= 0, "waitFd succeeded without a descriptor");
                return fd;
            }
            code::AGAIN => assert!(Instant::now() < end, "waitFd kept answering AGAIN"),
            rc => panic!("waitFd failed ({rc}): {:?}", LOG.lock().unwrap()),
        }
    }
}

/// Whether `fd` turns readable within the hang guard.
fn readable(fd: c_int) -> bool {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    let n = unsafe { libc::poll(&mut pfd, 1, DEADLINE.as_millis() as c_int) };
    n == 1 && pfd.revents & libc::POLLIN != 0
}

#[test]
fn a_receiver_sleeps_on_its_wait_descriptor_until_a_message_arrives() {
    let p = plugin();
    let (a, b) = pair(p);
    for round in 0..4u8 {
        let size = [1usize, 4096, 100_000, 8][round as usize].min(max_message(p));
        let out: Vec<u8> = (0..size).map(|i| (i as u8) ^ round).collect();
        let mut inb = vec![0u8; size];
        // SAFETY: inb lives until the receive finishes.
        let rr =
            post(|q| unsafe { (p.irecv)(b.0, inb.as_mut_ptr().cast(), size, 9, null_mut(), q) });
        let fd = wait_fd(p, b);
        // SAFETY: out lives until the send finishes.
        let rs = post(|q| unsafe { (p.isend)(a.0, out.as_ptr().cast(), size, 9, null_mut(), q) });
        assert_eq!(wait_all(p, &[rs]), [(code::SUCCESS, size)]);
        // The receiver is not called until its descriptor says so.
        assert!(
            readable(fd),
            "round {round}: the wait descriptor never turned readable"
        );
        assert_eq!(wait_all(p, &[rr]), [(code::SUCCESS, size)]);
        assert!(inb == out, "round {round}: data differs");
    }
    let mut fd: c_int = -1;
    // SAFETY: valid out-pointer; the handle is not a comm.
    assert_eq!(unsafe { (p.wait_fd)(null_mut(), &mut fd) }, code::E_INVALID);
    // SAFETY: a NULL out-pointer is refused.
    assert_eq!(
        unsafe { (p.wait_fd)(b.0, std::ptr::null_mut()) },
        code::E_INVALID
    );
    // SAFETY: comms from pair().
    unsafe {
        (p.close_comm)(a.0);
        (p.close_comm)(b.0);
    }
    // SAFETY: valid out-pointer; the comm is closed.
    assert_eq!(unsafe { (p.wait_fd)(b.0, &mut fd) }, code::E_INVALID);
}
