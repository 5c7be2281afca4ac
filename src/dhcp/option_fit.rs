//! Laying out a reply's options: the message type and server identifier first, the
//! echoed client identifier next (RFC 6842 §3), then what the client asked for in option
//! 55 in its order, then the rest by code, the relay agent information last (RFC 3046
//! §2.1); and never more than the client can take (option 57, RFC 2132 §9.10; at least
//! 576 octets with IP and UDP headers, RFC 2131 §2). What does not fit is left out,
//! options nobody asked for first; the type, server identifier, client identifier and
//! relay agent information always stay. With the client's consent (it lists option 52
//! in 55), the `file` and `sname` fields carry the overflow instead (RFC 2132 §9.3),
//! when the reply does not use them itself.

use dhcproto::v4::{DhcpOption, DhcpOptions, OptionCode};

/// BOOTP header up to `sname` (RFC 2131 §2).
const SNAME_AT: usize = 44;
/// The `file` field.
const FILE_AT: usize = 108;
/// Where options start: the 236-octet header and the magic cookie.
const OPTIONS_AT: usize = 240;
/// IPv4 and UDP headers, which option 57 counts (RFC 2132 §9.10).
const IP_UDP: usize = 28;
/// The smallest size a client must accept (RFC 2131 §2): 576 with IP and UDP.
const MIN_MAX_LEN: usize = 576;

/// What the request says about the reply it can take.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fit {
    /// Option 55, in the client's order.
    pub requested: Vec<u8>,
    /// The largest DHCP message (without IP and UDP headers) it takes.
    pub max_len: usize,
    /// It lists option 52: `file` and `sname` may carry options.
    pub overload: bool,
}

impl Default for Fit {
    fn default() -> Self {
        Self {
            requested: Vec::new(),
            max_len: MIN_MAX_LEN - IP_UDP,
            overload: false,
        }
    }
}

impl Fit {
    /// From the request's options 55 and 57.
    pub fn for_request(opts: &DhcpOptions) -> Self {
        let requested: Vec<u8> = match opts.get(OptionCode::ParameterRequestList) {
            Some(DhcpOption::ParameterRequestList(codes)) => {
                codes.iter().map(|&c| u8::from(c)).collect()
            }
            _ => Vec::new(),
        };
        let max = match opts.get(OptionCode::MaxMessageSize) {
            Some(DhcpOption::MaxMessageSize(n)) => usize::from(*n),
            _ => 0,
        };
        Self {
            overload: requested.contains(&52),
            requested,
            max_len: max.max(MIN_MAX_LEN) - IP_UDP,
        }
    }

    fn rank(&self, code: u8) -> usize {
        match code {
            53 => 0,
            54 => 1,
            61 => 2,
            82 => usize::MAX,
            c => self
                .requested
                .iter()
                .position(|&r| r == c)
                .map_or(1000 + usize::from(c), |p| 3 + p),
        }
    }
}

/// One option of the encoded reply: its code and where its instances lie.
#[derive(Debug, Clone, Copy)]
struct Item {
    code: u8,
    start: usize,
    end: usize,
}

/// What laying out left out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Laid {
    /// Options left out for want of room.
    pub dropped: usize,
    /// Options carried in `file` / `sname`.
    pub overloaded: usize,
}

/// Re-lays the options of the encoded reply in `msg` (header, cookie, options, End) for
/// `fit`. A message that is not a whole encoded reply is left as it is.
pub fn lay_out(msg: &mut Vec<u8>, fit: &Fit) -> Laid {
    let mut items: Vec<Item> = Vec::with_capacity(24);
    let mut at = OPTIONS_AT;
    loop {
        match msg.get(at) {
            Some(255) => break,
            Some(0) => at += 1,
            Some(&code) => {
                let Some(&len) = msg.get(at + 1) else {
                    return Laid::default();
                };
                let end = at + 2 + usize::from(len);
                if end > msg.len() {
                    return Laid::default();
                }
                // The instances of a long option (RFC 3396) stay together.
                match items.last_mut() {
                    Some(last) if last.code == code && last.end == at => last.end = end,
                    _ => items.push(Item {
                        code,
                        start: at,
                        end,
                    }),
                }
                at = end;
            }
            None => return Laid::default(),
        }
    }
    items.sort_by_key(|i| fit.rank(i.code));
    let size = |i: &Item| i.end - i.start;
    // RFC 6842 §3: the client identifier echo is a MUST, like the type and server id.
    let mandatory = |i: &Item| matches!(i.code, 53 | 54 | 61 | 82);
    // Room in the options field, the End option (1) kept aside.
    let mut room = fit.max_len.saturating_sub(OPTIONS_AT + 1);
    let overload_ok = fit.overload && msg[SNAME_AT..FILE_AT + 128].iter().all(|&b| b == 0);
    if overload_ok && items.iter().map(size).sum::<usize>() > room {
        room = room.saturating_sub(3); // option 52 itself
    }
    let mut main = Vec::with_capacity(room);
    let mut rest: Vec<Item> = Vec::new();
    let mut used = 0;
    // The relay agent information goes last, so its room is kept first.
    let relay: usize = items.iter().filter(|i| i.code == 82).map(size).sum();
    for item in items.iter().filter(|i| i.code != 82) {
        if mandatory(item) || used + size(item) + relay <= room {
            used += size(item);
            main.extend_from_slice(&msg[item.start..item.end]);
        } else {
            rest.push(*item);
        }
    }
    let mut laid = Laid::default();
    // RFC 2132 §9.3: `file` first, then `sname`; each ends with End.
    let mut fields = [
        (FILE_AT, 128usize, 1u8, Vec::new()),
        (SNAME_AT, 64, 2, Vec::new()),
    ];
    if overload_ok {
        for item in &rest {
            let placed = fields
                .iter_mut()
                .find(|(_, cap, _, buf)| buf.len() + size(item) < *cap);
            match placed {
                Some((_, _, _, buf)) => {
                    buf.extend_from_slice(&msg[item.start..item.end]);
                    laid.overloaded += 1;
                }
                None => laid.dropped += 1,
            }
        }
    } else {
        laid.dropped = rest.len();
    }
    let which = fields
        .iter()
        .filter(|f| !f.3.is_empty())
        .fold(0u8, |acc, f| acc | f.2);
    if which != 0 {
        main.extend_from_slice(&[52, 1, which]);
    }
    for item in items.iter().filter(|i| i.code == 82) {
        main.extend_from_slice(&msg[item.start..item.end]);
    }
    for (at, cap, bit, buf) in &fields {
        if which & bit != 0 {
            let field = &mut msg[*at..*at + cap];
            field.fill(0);
            field[..buf.len()].copy_from_slice(buf);
            field[buf.len()] = 255;
        }
    }
    msg.truncate(OPTIONS_AT);
    msg.extend_from_slice(&main);
    msg.push(255);
    laid
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An encoded reply: header, cookie, then `opts` as (code, length) with filler data.
    fn reply(opts: &[(u8, usize)]) -> Vec<u8> {
        let mut m = vec![0u8; 236];
        m.extend_from_slice(&[99, 130, 83, 99]);
        for &(code, len) in opts {
            m.push(code);
            m.push(len as u8);
            m.extend(std::iter::repeat_n(code, len));
        }
        m.push(255);
        m
    }

    fn codes(m: &[u8], from: usize) -> Vec<u8> {
        let mut out = Vec::new();
        let mut at = from;
        while let Some(&c) = m.get(at) {
            if c == 255 {
                break;
            }
            out.push(c);
            at += 2 + usize::from(m[at + 1]);
        }
        out
    }

    fn fit(requested: &[u8], max57: u16) -> Fit {
        let mut o = DhcpOptions::new();
        o.insert(DhcpOption::ParameterRequestList(
            requested.iter().map(|&c| OptionCode::from(c)).collect(),
        ));
        if max57 > 0 {
            o.insert(DhcpOption::MaxMessageSize(max57));
        }
        Fit::for_request(&o)
    }

    #[test]
    fn requested_options_come_first_in_the_clients_order() {
        let mut m = reply(&[(1, 4), (3, 4), (6, 8), (42, 4), (53, 1), (54, 4), (82, 6)]);
        let laid = lay_out(&mut m, &fit(&[42, 6], 0));
        assert_eq!(laid, Laid::default());
        assert_eq!(codes(&m, OPTIONS_AT), [53, 54, 42, 6, 1, 3, 82]);
    }

    #[test]
    fn a_reply_never_exceeds_what_the_client_takes_and_unrequested_options_go_first() {
        // 548 octets without option 57: 240 of header, 307 of options, End.
        let big = [(53, 1), (54, 4), (67, 200), (43, 100), (60, 50), (3, 4)];
        let mut m = reply(&big);
        let laid = lay_out(&mut m, &fit(&[3, 67], 0));
        assert!(m.len() <= 548, "{}", m.len());
        assert_eq!(codes(&m, OPTIONS_AT), [53, 54, 3, 67, 60]);
        assert_eq!(laid.dropped, 1);
        // With option 57 = 1500 everything fits.
        let mut m = reply(&big);
        assert_eq!(lay_out(&mut m, &fit(&[3, 67], 1500)).dropped, 0);
        assert_eq!(codes(&m, OPTIONS_AT).len(), 6);
        // Option 57 below 576 counts as 576.
        assert_eq!(fit(&[], 300).max_len, 548);
    }

    #[test]
    fn the_echoed_client_identifier_stays_when_room_runs_out() {
        // RFC 6842 §3: 61 goes back whatever else is left out.
        let big = [(53, 1), (54, 4), (67, 200), (43, 30), (60, 50), (61, 60)];
        let mut m = reply(&big);
        let laid = lay_out(&mut m, &fit(&[67, 43, 60], 0));
        assert!(m.len() <= 548, "{}", m.len());
        assert_eq!(codes(&m, OPTIONS_AT), [53, 54, 61, 67, 43]);
        assert_eq!(laid.dropped, 1);
    }

    #[test]
    fn overload_only_with_consent_and_free_fields() {
        let big = [(53, 1), (54, 4), (67, 200), (43, 100), (60, 50), (3, 4)];
        let mut m = reply(&big);
        let laid = lay_out(&mut m, &fit(&[3, 67, 52], 0));
        assert_eq!(
            laid,
            Laid {
                dropped: 0,
                overloaded: 1
            }
        );
        assert!(m.len() <= 548);
        let main = codes(&m, OPTIONS_AT);
        assert_eq!(main, [53, 54, 3, 67, 60, 52]);
        assert_eq!(codes(&m, FILE_AT), [43]);
        // A reply whose `file` holds a boot file name keeps it, and drops instead.
        let mut m = reply(&big);
        m[FILE_AT] = b'x';
        assert_eq!(lay_out(&mut m, &fit(&[3, 67, 52], 0)).dropped, 1);
        assert_eq!(m[FILE_AT], b'x');
    }

    #[test]
    fn a_long_option_keeps_its_instances_together() {
        let mut m = reply(&[(53, 1), (67, 255), (67, 10), (3, 4)]);
        lay_out(&mut m, &fit(&[3], 1500));
        assert_eq!(codes(&m, OPTIONS_AT), [53, 3, 67, 67]);
    }
}
