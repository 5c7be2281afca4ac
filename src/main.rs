//! The `shardboot` command: parse flags, load config, start tracing, run.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{CommandFactory, Parser, Subcommand, ValueEnum};
use tokio_util::sync::CancellationToken;

use shardboot::config::{
    apply_env_overrides, custom_firmware_dir, env_var_name, parse_flag, Config, ConfigError,
    ExplainBase, HostFacts, Layer, LogFormat, Source, DATABASE_CA_FILE, DATABASE_VAR,
};
use shardboot::{app, cli};

/// mimalloc instead of glibc's malloc: the DHCP engines, the committer and the HTTP
/// workers allocate per message on several threads, and glibc's malloc was a tenth of
/// the boot route's CPU (docs/benchmarks.md has the before and after).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The commit the binary is built from: `SHARDBOOT_COMMIT` at build time
/// (`deploy/image.sh` sets it from git), else "unknown". Read from the environment, not
/// from git by a build script, so a commit does not rebuild the library and every test.
const COMMIT: &str = match option_env!("SHARDBOOT_COMMIT") {
    Some(c) => c,
    None => "unknown",
};

/// `--version`: the crate's version and the commit.
fn version() -> &'static str {
    static V: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    V.get_or_init(|| format!("{} (commit {COMMIT})", env!("CARGO_PKG_VERSION")))
}

#[derive(Parser, Clone)]
#[command(version = version(), about)]
struct Cli {
    /// TOML config file; without it the built-in default is used.
    #[arg(long, short, global = true, env = "SHARDBOOT_CONFIG")]
    config: Option<PathBuf>,
    /// Derive the whole config from another server's environment variables instead
    /// of a file (`ironic-image`: its dnsmasq variables; docs/ironic-image-env.md).
    #[arg(long, global = true, value_enum, conflicts_with = "config")]
    env: Option<EnvSource>,
    /// Override a config key, e.g. --set dhcp.port=6767 (repeatable; after SHARDBOOT_* vars).
    #[arg(long = "set", value_name = "KEY=VALUE", global = true)]
    set: Vec<String>,
    /// Shortcut for --set state_dir=DIR.
    #[arg(long, global = true)]
    state_dir: Option<String>,
    /// Shortcut for --set log_format=json.
    #[arg(long, global = true)]
    json_logs: bool,
    #[command(subcommand)]
    command: Command,
}

/// Environments `--env` understands.
#[derive(Clone, Copy, ValueEnum)]
enum EnvSource {
    /// ironic-image's dnsmasq container (as Metal3 and IrSO run it).
    IronicImage,
}

#[derive(Subcommand, Clone)]
enum Command {
    /// Run the DHCP server until SIGINT/SIGTERM.
    Serve,
    /// Validate the configuration; print every problem with its key.
    CheckConfig {
        /// Then print the effective configuration, every key with its value and where
        /// the value came from (file, SHARDBOOT_* variable, flag, ironic-image variable
        /// or the built-in default); secrets masked.
        #[arg(long)]
        explain: bool,
    },
    /// Show which member is responsible for a MAC, how that was decided, and the script
    /// `/v1/boot/{mac}/boot.ipxe` would serve.
    Owner {
        /// The MAC address (aa:bb:…, aa-bb-…, aabbcc…).
        mac: String,
    },
    /// List the leases: from the store, or through the running server's operator API
    /// when the server holds the store (or with --server). `import` and `export` move
    /// them from and to dnsmasq, or the whole store as JSON (docs/dnsmasq-migration.md).
    #[command(args_conflicts_with_subcommands = true)]
    Leases {
        #[command(subcommand)]
        action: Option<LeasesAction>,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Only this MAC's leases.
        #[arg(long)]
        mac: Option<String>,
        /// The DHCPv6 leases instead (address, DUID, IAID, MAC when known).
        #[arg(long)]
        v6: bool,
        /// Operator API base URL (default: this config's http.listen on this host).
        #[arg(long, env = "SHARDBOOT_SERVER")]
        server: Option<String>,
        /// File with the bearer token (default: the config's http.token_file).
        #[arg(long, env = "SHARDBOOT_TOKEN_FILE")]
        token_file: Option<PathBuf>,
    },
    /// The running server's members: source (static or Ironic), liveness, each one's
    /// share of the ranges, and whether the list is stale.
    Members {
        /// Print the API's JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Operator API base URL (default: this config's http.listen on this host).
        #[arg(long, env = "SHARDBOOT_SERVER")]
        server: Option<String>,
        /// File with the bearer token (default: the config's http.token_file).
        #[arg(long, env = "SHARDBOOT_TOKEN_FILE")]
        token_file: Option<PathBuf>,
    },
    /// One machine's boot timeline on the running server (DHCP, TFTP, boot requests),
    /// then every new event as it happens, until interrupted.
    Trace {
        /// The machine's MAC (any common spelling).
        mac: String,
        /// Print what is there and stop, instead of following.
        #[arg(long)]
        once: bool,
        /// Operator API base URL (default: this config's http.listen on this host).
        #[arg(long, env = "SHARDBOOT_SERVER")]
        server: Option<String>,
        /// File with the bearer token (default: the config's http.token_file).
        #[arg(long, env = "SHARDBOOT_TOKEN_FILE")]
        token_file: Option<PathBuf>,
    },
    /// The boot board of the running server: every machine seen recently by stage,
    /// stuck machines first, the members and the pools; redrawn every two seconds.
    Board {
        /// Print it once and stop, instead of redrawing.
        #[arg(long)]
        once: bool,
        /// Only machines whose MAC (any spelling) or address contains this.
        #[arg(long)]
        search: Option<String>,
        /// Only this stage (silent, offered, bound, boot_file, first_stage, chained, fallback).
        #[arg(long)]
        stage: Option<String>,
        /// Only stuck machines.
        #[arg(long)]
        stuck: bool,
        /// Only the answering member's own view (no other member is asked).
        #[arg(long)]
        local: bool,
        /// Machines shown.
        #[arg(long, default_value_t = 40)]
        limit: usize,
        /// Operator API base URL (default: this config's http.listen on this host).
        #[arg(long, env = "SHARDBOOT_SERVER")]
        server: Option<String>,
        /// File with the bearer token (default: the config's http.token_file).
        #[arg(long, env = "SHARDBOOT_TOKEN_FILE")]
        token_file: Option<PathBuf>,
    },
    /// Allow, deny or reset a MAC on the running server (takes effect on its next packet).
    Hosts {
        /// allow, deny or default.
        #[arg(value_parser = ["allow", "deny", "default"])]
        policy: String,
        /// The MAC address.
        mac: String,
        /// Operator API base URL (default: this config's http.listen on this host).
        #[arg(long, env = "SHARDBOOT_SERVER")]
        server: Option<String>,
        /// File with the bearer token (default: the config's http.token_file).
        #[arg(long, env = "SHARDBOOT_TOKEN_FILE")]
        token_file: Option<PathBuf>,
    },
    /// Print the completion script for a shell (packaging: deploy/deb.sh installs it).
    #[command(hide = true)]
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: cli::generate::Shell,
    },
    /// Print the man page, roff for `man -l -` (packaging: deploy/deb.sh installs it).
    #[command(hide = true)]
    Man,
}

/// `shardboot leases import|export`.
#[derive(Subcommand, Clone)]
enum LeasesAction {
    /// Write leases into the store (offline: stop the server first). Every record is
    /// checked first; one bad line or record imports nothing.
    #[command(group(clap::ArgGroup::new("from").required(true).args(["dnsmasq", "json"])))]
    Import {
        /// A dnsmasq lease file (ironic-image: /var/lib/dnsmasq/dnsmasq.leases).
        #[arg(long, value_name = "FILE")]
        dnsmasq: Option<PathBuf>,
        /// A document of `leases export --json`, restored into an empty store.
        #[arg(long, value_name = "FILE")]
        json: Option<PathBuf>,
    },
    /// Write the leases out: the bound ones in dnsmasq's lease-file format (from the
    /// store, or through the running server's operator API), or the whole store as
    /// JSON (offline) for a backup or a move across versions.
    #[command(group(clap::ArgGroup::new("to").required(true).args(["dnsmasq", "json"])))]
    Export {
        /// dnsmasq's lease-file format.
        #[arg(long)]
        dnsmasq: bool,
        /// The whole store as one JSON document.
        #[arg(long)]
        json: bool,
        /// Write this file (replaced atomically) instead of stdout.
        #[arg(long, short, value_name = "FILE")]
        output: Option<PathBuf>,
        /// Operator API base URL (default: this config's http.listen on this host).
        #[arg(long, env = "SHARDBOOT_SERVER")]
        server: Option<String>,
        /// File with the bearer token (default: the config's http.token_file).
        #[arg(long, env = "SHARDBOOT_TOKEN_FILE")]
        token_file: Option<PathBuf>,
    },
}

/// The flags' overrides, in the order they are applied (after `SHARDBOOT_*`).
fn flag_layers(cli: &Cli) -> Result<Vec<Layer>, ConfigError> {
    let flag = |(key, value): (String, String), name: &str| Layer {
        key,
        value,
        source: Source::Flag(name.into()),
    };
    let mut layers = Vec::new();
    for f in &cli.set {
        layers.push(flag(parse_flag(f)?, "--set"));
    }
    if let Some(dir) = &cli.state_dir {
        layers.push(flag(("state_dir".into(), toml_string(dir)), "--state-dir"));
    }
    if cli.json_logs {
        layers.push(flag(("log_format".into(), "json".into()), "--json-logs"));
    }
    Ok(layers)
}

/// The `SHARDBOOT_*` variables' overrides; with `--env ironic-image`, without
/// SHARDBOOT_DATABASE, which the mapping reads itself (it is no config key).
fn env_layers(cli: &Cli) -> Vec<Layer> {
    let vars = std::env::vars().filter(|(k, _)| cli.env.is_none() || k != DATABASE_VAR);
    apply_env_overrides(vars)
        .into_iter()
        .map(|(key, value)| Layer {
            source: Source::Env(env_var_name(&key)),
            key,
            value,
        })
        .collect()
}

fn host_facts(vars: &BTreeMap<String, String>) -> HostFacts {
    HostFacts {
        // Without the list, ranges written without a netmask are refused.
        addresses: shardboot::dhcp::shell::socket::host_addresses().unwrap_or_default(),
        macs: shardboot::dhcp6::shell::socket::host_macs(),
        custom_firmware_readable: custom_firmware_dir(vars).read_dir().is_ok(),
        database_ca_readable: std::fs::File::open(DATABASE_CA_FILE).is_ok(),
        ipxe_cert_readable: std::fs::File::open(shardboot::config::IPXE_CERT_FILE).is_ok(),
        ironic_ca_readable: std::fs::File::open(shardboot::config::IRONIC_CA_FILE).is_ok(),
    }
}

fn load(cli: &Cli) -> Result<Config, ConfigError> {
    let pairs = |layers: Vec<Layer>| layers.into_iter().map(|l| (l.key, l.value));
    let overrides: Vec<(String, String)> = pairs(flag_layers(cli)?).collect();
    match cli.env {
        None => Config::load(cli.config.as_deref(), &overrides),
        Some(EnvSource::IronicImage) => {
            let vars: BTreeMap<String, String> = std::env::vars().collect();
            if matches!(cli.command, Command::Serve) {
                wait_for_provisioning_ip(&vars)?;
            }
            let mut all: Vec<(String, String)> = pairs(env_layers(cli)).collect();
            all.extend(overrides);
            Config::from_ironic_env(&vars, &host_facts(&vars), &all)
        }
    }
}

/// `check-config --explain`: the layers `load` applied, again, key by key.
fn explain(cli: &Cli) -> anyhow::Result<()> {
    let mut layers = env_layers(cli);
    layers.extend(flag_layers(cli)?);
    let vars: BTreeMap<String, String> = std::env::vars().collect();
    let host;
    let base = match (&cli.env, &cli.config) {
        (Some(EnvSource::IronicImage), _) => {
            host = host_facts(&vars);
            ExplainBase::IronicImage {
                vars: &vars,
                host: &host,
            }
        }
        (None, Some(path)) => ExplainBase::File(path),
        (None, None) => ExplainBase::BuiltIn,
    };
    cli::print_explained(base, &layers)
}

/// Quotes a path so it is always taken as a TOML string.
fn toml_string(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

/// `SHARDBOOT_LOG` when it is set and not empty: it wins over `log_level`, at start
/// and on every reload.
fn log_from_env() -> Option<String> {
    std::env::var("SHARDBOOT_LOG")
        .ok()
        .filter(|v| !v.trim().is_empty())
}

/// Starts tracing with `SHARDBOOT_LOG`, else the config's `log_level`; returns what
/// swaps the filter on a reload, `None` when `SHARDBOOT_LOG` fixed it.
fn init_tracing(config: &Config) -> Option<shardboot::reload::LogFilter> {
    use tracing_subscriber::EnvFilter;
    // A SHARDBOOT_LOG that does not parse is passed over; the config's directive was
    // checked when it loaded.
    let env = log_from_env().and_then(|e| EnvFilter::builder().parse(e).ok());
    let fixed = env.is_some();
    let filter = env
        .or_else(|| EnvFilter::builder().parse(&config.log_level).ok())
        .unwrap_or_else(|| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Colour codes only on a terminal, never in journald or a log file.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    // The two formats are two subscriber types; each gives its reload handle as one
    // closure.
    macro_rules! start {
        ($builder:expr) => {{
            let builder = $builder.with_filter_reloading();
            let handle = builder.reload_handle();
            builder.init();
            std::sync::Arc::new(move |directive: &str| {
                let filter = EnvFilter::builder()
                    .parse(directive)
                    .map_err(|e| e.to_string())?;
                handle.reload(filter).map_err(|e| e.to_string())
            }) as shardboot::reload::LogFilter
        }};
    }
    let swap = match config.log_format {
        LogFormat::Json => start!(builder.json()),
        LogFormat::Text => start!(builder),
    };
    (!fixed).then_some(swap)
}

fn main() -> ExitCode {
    shardboot::build_info::set_commit(COMMIT);
    let cli = Cli::parse();
    // Generated from the flags alone: no configuration is read, so a package build
    // never depends on the build machine's environment.
    match cli.command {
        Command::Completions { shell } => {
            cli::generate::completions(&mut Cli::command(), shell, &mut std::io::stdout());
            return ExitCode::SUCCESS;
        }
        Command::Man => {
            return match cli::generate::man_page(Cli::command(), &mut std::io::stdout()) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("shardboot: writing the man page: {e}");
                    ExitCode::FAILURE
                }
            };
        }
        _ => {}
    }
    let config = match load(&cli) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("shardboot: invalid configuration:\n{e}");
            return ExitCode::from(2);
        }
    };
    // A reload reads the configuration the way it was read now, overrides included.
    let reloader: shardboot::reload::Loader = {
        let cli = cli.clone();
        std::sync::Arc::new(move || load(&cli).map_err(|e| e.to_string()))
    };
    let result = match cli.command {
        Command::CheckConfig { explain: false } => cli::check_config(&config),
        Command::CheckConfig { explain: true } => {
            cli::check_config(&config).and_then(|()| explain(&cli))
        }
        Command::Leases {
            action: Some(LeasesAction::Import { dnsmasq, json }),
            ..
        } => match (dnsmasq, json) {
            (Some(file), _) => cli::import_dnsmasq(&config, &file),
            (None, Some(file)) => cli::import_json(&config, &file),
            (None, None) => unreachable!("clap requires one of --dnsmasq, --json"),
        },
        Command::Leases {
            action:
                Some(LeasesAction::Export {
                    json,
                    output,
                    server,
                    token_file,
                    ..
                }),
            ..
        } => {
            if json {
                cli::export_json(&config, output.as_deref())
            } else {
                cli::export_dnsmasq(
                    &config,
                    output.as_deref(),
                    &cli::Remote::new(&config, server, token_file),
                )
            }
        }
        Command::Leases {
            action: None,
            json,
            mac,
            v6,
            server,
            token_file,
        } => {
            let remote = cli::Remote::new(&config, server, token_file);
            cli::print_leases(&config, json, v6, mac.as_deref(), remote)
        }
        Command::Hosts {
            policy,
            mac,
            server,
            token_file,
        } => cli::set_host(
            &cli::Remote::new(&config, server, token_file),
            &policy,
            &mac,
        ),
        Command::Members {
            json,
            server,
            token_file,
        } => cli::print_members(&cli::Remote::new(&config, server, token_file), json),
        Command::Trace {
            mac,
            once,
            server,
            token_file,
        } => cli::trace(&cli::Remote::new(&config, server, token_file), &mac, once),
        Command::Board {
            once,
            search,
            stage,
            stuck,
            local,
            limit,
            server,
            token_file,
        } => cli::board(
            &cli::Remote::new(&config, server, token_file),
            &cli::BoardArgs {
                search,
                stage,
                stuck,
                local,
                limit,
            },
            once,
        ),
        Command::Owner { mac } => {
            // Warnings (Ironic unreachable) and, with SHARDBOOT_LOG=debug, the
            // resolvers' decision trail go to stderr.
            init_tracing(&config);
            cli::print_owner(&config, &mac)
        }
        Command::Serve => serve(config, &config_source(&cli), reloader),
        Command::Completions { .. } | Command::Man => unreachable!("handled before loading"),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("shardboot: {}", cli::one_line(&e));
            ExitCode::FAILURE
        }
    }
}

/// ironic-image's start script waits for `PROVISIONING_IP` to be configured on an
/// interface before dnsmasq starts (a keepalived VIP arrives late); `serve` does the
/// same, bounded by `IRONIC_IP_WAIT_TIMEOUT`, and fails naming the variable after it.
/// Nothing listens meanwhile, so the container's probes say "not ready".
fn wait_for_provisioning_ip(vars: &BTreeMap<String, String>) -> Result<(), ConfigError> {
    use shardboot::dhcp::shell::socket::host_has_address;
    let Some((ip, limit)) = shardboot::config::awaited_address(vars) else {
        return Ok(());
    };
    let start = std::time::Instant::now();
    let mut said = None;
    while !host_has_address(ip) {
        let waited = start.elapsed();
        if waited >= limit {
            return Err(ConfigError::Invalid(vec![shardboot::config::ConfigIssue {
                key: "PROVISIONING_IP".into(),
                reason: format!(
                    "{ip} is on no interface of this host after {} s (IRONIC_IP_WAIT_TIMEOUT)",
                    limit.as_secs()
                ),
            }]));
        }
        // One line at the start and every 10 s, as ironic-image says it is waiting.
        if said
            .is_none_or(|t: std::time::Duration| waited >= t + std::time::Duration::from_secs(10))
        {
            eprintln!(
                "shardboot: waiting for PROVISIONING_IP {ip} to be configured on an interface \
                 ({} s of at most {} s)",
                waited.as_secs(),
                limit.as_secs()
            );
            said = Some(waited);
        }
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
    Ok(())
}

/// Where the running config came from, for the start-up line: the file, the
/// environment it was derived from, or the built-in default, and how many keys were
/// overridden on top (`--set`, `--state-dir`, `--json-logs`, `SHARDBOOT_*`).
fn config_source(cli: &Cli) -> String {
    let base = match (&cli.env, &cli.config) {
        (Some(EnvSource::IronicImage), _) => "--env ironic-image".to_string(),
        (None, Some(path)) => format!("file {}", path.display()),
        (None, None) => "the built-in default".to_string(),
    };
    let flags = cli.set.len() + usize::from(cli.state_dir.is_some()) + usize::from(cli.json_logs);
    let vars = apply_env_overrides(std::env::vars()).len();
    format!("{base} ({flags} flags and {vars} SHARDBOOT_* variables on top)")
}

fn serve(config: Config, source: &str, reloader: shardboot::reload::Loader) -> anyhow::Result<()> {
    let log_filter = init_tracing(&config);
    // The first line of every run: what runs, and on what (ironic-image's dnsmasq
    // says as much; an operator reading `kubectl logs` starts here).
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        commit = COMMIT,
        config = %source,
        log = %log_from_env().map_or_else(|| format!("log_level {:?}", config.log_level), |e| format!("SHARDBOOT_LOG {e:?}")),
        state_dir = %config.state_dir.display(),
        "shardboot starting"
    );
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    runtime.block_on(async {
        let shutdown = CancellationToken::new();
        let stop = shutdown.clone();
        let handles = shardboot::handles::Handles::default();
        if let Some(f) = log_filter {
            handles.reload.set_log_filter(f);
        }
        let reload = handles.reload.clone();
        tokio::spawn(async move {
            wait_for_signal(&reload).await;
            stop.cancel();
        });
        app::run(config, Some(reloader), handles, shutdown).await?;
        Ok(())
    })
}

/// Waits for SIGTERM or Ctrl-C; SIGHUP meanwhile reloads the configuration (as
/// dnsmasq re-reads its files on it: the default action would end the process).
async fn wait_for_signal(reload: &shardboot::reload::ReloadRequests) {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("installing SIGTERM handler");
    let mut hup = signal(SignalKind::hangup()).expect("installing SIGHUP handler");
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => break,
            _ = term.recv() => break,
            _ = hup.recv() => {
                tracing::info!("SIGHUP: reloading the configuration");
                reload.reload_detached();
            }
        }
    }
    tracing::info!("shutting down");
}
