//! Process limits a busy server needs raised.

use tracing::{info, warn};

/// Raises the soft limit on open files to the hard limit. Every TFTP transfer holds a
/// socket (and, while loading, its file), every HTTP client a connection: with
/// `tftp.max_transfers` in the hundreds, a default soft limit of 1,024 is reached by
/// one rack booting at once. Best effort: a failure is logged, not fatal.
pub fn raise_open_files() {
    let mut lim = match open_files() {
        Ok(l) => l,
        Err(e) => {
            warn!(error = %e, "cannot read the open-file limit");
            return;
        }
    };
    if lim.rlim_cur >= lim.rlim_max {
        return;
    }
    let from = lim.rlim_cur;
    lim.rlim_cur = lim.rlim_max;
    // SAFETY: as above; only the soft limit changes, up to the hard limit.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) } != 0 {
        warn!(error = %std::io::Error::last_os_error(), "cannot raise the open-file limit");
        return;
    }
    info!(from, to = lim.rlim_max, "raised the open-file limit");
}

/// The process's open-file limits (soft, hard).
fn open_files() -> std::io::Result<libc::rlimit> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: a valid resource and a pointer to a properly sized rlimit.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(lim)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_lowered_soft_limit_is_raised_to_the_hard_limit() {
        let hard = super::open_files().unwrap().rlim_max;
        // Just below the hard limit: other tests run in this process at the same time.
        let low = libc::rlimit {
            rlim_cur: hard - 1,
            rlim_max: hard,
        };
        // SAFETY: lowering the soft limit is always allowed.
        assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &low) }, 0);
        super::raise_open_files();
        assert_eq!(super::open_files().unwrap().rlim_cur, hard);
    }
}
