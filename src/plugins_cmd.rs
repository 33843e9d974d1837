//! `nenyax plugins`: what this process can use of every kind (built in, from PATH, from the
//! plugins config), the extension points (`--kinds`) and the public registry (`--registry`).

use nenyax::plugins::{self, Kind};
use nenyax::Error;

/// What to list.
#[derive(clap::Args)]
pub struct PluginsArgs {
    /// The extension points and the version of each one's interface
    #[arg(long, conflicts_with = "registry")]
    kinds: bool,
    /// The public registry of third-party plugins (registry/plugins.toml, built into this binary)
    #[arg(long)]
    registry: bool,
    /// Only this kind: driver, sandbox, judge, learner, provider, hub or telemetry
    #[arg(long, value_name = "KIND")]
    kind: Option<String>,
    /// Print JSON instead of a table
    #[arg(long)]
    json: bool,
}

/// Print the chosen listing.
pub fn run(args: &PluginsArgs) -> Result<(), Error> {
    let only = args
        .kind
        .as_deref()
        .map(Kind::parse)
        .transpose()
        .map_err(Error::Config)?;
    let keep = |k: Kind| only.map_or(true, |o| o == k);
    if args.kinds {
        let rows: Vec<_> = plugins::kinds()
            .into_iter()
            .filter(|i| keep(i.kind))
            .collect();
        if args.json {
            return outln!(
                "{}",
                serde_json::to_string_pretty(&rows).expect("serialises")
            );
        }
        for i in rows {
            let version = i.version.map_or("-".to_string(), |v| format!("v{v}"));
            outln!("{:<10} {:<4} {}", i.kind.name(), version, i.interface)?;
            outln!("{:<10} {:<4} {}", "", "", i.how)?;
        }
        return Ok(());
    }
    if args.registry {
        let rows: Vec<_> = plugins::registry::listed()?
            .into_iter()
            .filter(|l| keep(l.kind))
            .collect();
        if args.json {
            return outln!(
                "{}",
                serde_json::to_string_pretty(&rows).expect("serialises")
            );
        }
        for l in rows {
            outln!(
                "{:<10} {:<16} {:<7} v{} {}",
                l.kind.name(),
                l.name,
                l.language,
                l.interface,
                l.summary
            )?;
            outln!(
                "{:<10} {:<16} source: {}; maintainer: {}",
                "",
                "",
                l.source,
                l.maintainer
            )?;
        }
        return Ok(());
    }
    let rows: Vec<_> = plugins::installed()
        .into_iter()
        .filter(|p| keep(p.kind))
        .collect();
    if args.json {
        return outln!(
            "{}",
            serde_json::to_string_pretty(&rows).expect("serialises")
        );
    }
    for p in rows {
        let status = if p.ready { "ready" } else { "missing" };
        outln!(
            "{:<10} {:<16} {:<8} {:<9} {:<8} {}",
            p.kind.name(),
            p.name,
            p.version.as_deref().unwrap_or("-"),
            p.origin.label(),
            status,
            p.summary
        )?;
        if let Some(path) = p.origin.path() {
            outln!("{:<10} {:<16} from: {}", "", "", path.display())?;
        }
        if let Some(n) = p.needs.as_deref().filter(|_| !p.ready) {
            outln!("{:<10} {:<16} needs: {n}", "", "")?;
        }
    }
    Ok(())
}

/// `nenyax plugin-check KIND NAME`: hold one plugin to its kind's conformance checks.
#[derive(clap::Args)]
pub struct PluginCheckArgs {
    /// The plugin's kind: sandbox, judge, learner, provider, telemetry or hub (drivers: `nenyax check URI`)
    kind: String,
    /// Its name: a built-in judge type or a plugin's name from the plugins config
    name: String,
    /// Print JSON instead of a table
    #[arg(long)]
    json: bool,
    /// Learners: the environment of the golden batch [default: builtin:guess?high=8&max_guesses=3]
    #[arg(long, value_name = "URI")]
    env: Option<String>,
}

/// Run the checks; exit status 1 when the plugin does not conform.
pub fn check(args: &PluginCheckArgs) -> Result<bool, Error> {
    let kind = Kind::parse(&args.kind).map_err(Error::Config)?;
    if args.env.is_some() && kind != Kind::Learner {
        return Err(Error::Config(format!(
            "--env picks the environment of a learner's golden batch; {kind}s are checked \
             without one"
        )));
    }
    let report = match (kind, args.env.as_deref()) {
        (Kind::Learner, Some(uri)) => plugins::conformance::check_learner_on(&args.name, uri)?,
        _ => plugins::conformance::check(kind, &args.name)?,
    };
    if args.json {
        outln!(
            "{}",
            serde_json::to_string_pretty(&report).expect("serialises")
        )?;
    } else {
        crate::out(format_args!("{}", report.render()))?;
    }
    Ok(report.passed())
}
