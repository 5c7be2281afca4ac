//! Shell completions and the man page, generated from the command-line definition so
//! they never drift from it; `deploy/deb.sh` installs what these print.

use std::io::Write;

pub use clap_complete::Shell;

/// Writes the completion script for `shell` of the command `cmd` to `out`.
pub fn completions(cmd: &mut clap::Command, shell: Shell, out: &mut dyn Write) {
    let name = cmd.get_name().to_string();
    clap_complete::generate(shell, cmd, name, out);
}

/// Writes the man page (section 1, roff) of the command `cmd` to `out`: its options,
/// and its subcommands with their one-line descriptions.
pub fn man_page(cmd: clap::Command, out: &mut dyn Write) -> std::io::Result<()> {
    clap_mangen::Man::new(cmd).render(out)
}
