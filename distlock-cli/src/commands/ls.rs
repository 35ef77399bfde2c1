//! `distlock ls [PREFIX] [--json]`: the locks and elections in use.

use distlock::ListedLock;
use distlock::LockBackendExt as _;
use serde_json::json;

use crate::cli::{LsArgs, TargetArgs};
use crate::exit::Failure;
use crate::target;

pub(crate) async fn ls(args: LsArgs, target: &TargetArgs) -> Result<u8, Failure> {
    let backend = target::connect_shared(target, "ls").await?;
    let listed = backend.list_all(&args.prefix).await?;
    if args.json {
        let entries: Vec<_> = listed.iter().map(entry_json).collect();
        println!("{}", serde_json::Value::Array(entries));
    } else {
        for entry in &listed {
            println!("{}", line(entry));
        }
        // Said on stderr so that stdout stays one line per name.
        if listed.is_empty() {
            if args.prefix.is_empty() {
                eprintln!("distlock: no locks");
            } else {
                eprintln!("distlock: no locks under {:?}", args.prefix);
            }
        }
    }
    Ok(0)
}

fn entry_json(entry: &ListedLock) -> serde_json::Value {
    json!({
        "name": entry.name.as_str(),
        "primitive": entry.primitive.as_str(),
        "token": entry.holder_token.map(|t| t.get()),
        "waiting": entry.waiting,
    })
}

/// `KIND NAME token=N waiting=W`, with `token=-` when nobody holds it.
fn line(entry: &ListedLock) -> String {
    let token = entry
        .holder_token
        .map_or_else(|| "-".to_owned(), |t| t.to_string());
    format!(
        "{:<8} {} token={token} waiting={}",
        entry.primitive.as_str(),
        entry.name,
        entry.waiting
    )
}
