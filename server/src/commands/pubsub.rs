//! SUBSCRIBE, UNSUBSCRIBE, PSUBSCRIBE, PUNSUBSCRIBE, SSUBSCRIBE, SUNSUBSCRIBE, PUBLISH,
//! SPUBLISH, PUBSUB (CHANNELS, NUMSUB, NUMPAT, SHARDCHANNELS, SHARDNUMSUB).

use std::sync::Arc;

use bytes::Bytes;

use super::{spec, CommandSpec, Session, NO_KEYS};
use crate::resp::Reply;
use crate::services::pubsub::{Kind, Limits, Subscriber};

pub(super) static COMMANDS: &[CommandSpec] = &[
    spec("subscribe", -2, &["pubsub", "noscript", "loading", "stale"], NO_KEYS, subscribe),
    spec("unsubscribe", -1, &["pubsub", "noscript", "loading", "stale"], NO_KEYS, unsubscribe),
    spec("psubscribe", -2, &["pubsub", "noscript", "loading", "stale"], NO_KEYS, psubscribe),
    spec("punsubscribe", -1, &["pubsub", "noscript", "loading", "stale"], NO_KEYS, punsubscribe),
    spec("ssubscribe", -2, &["pubsub", "noscript", "loading", "stale"], (1, -1, 1), ssubscribe),
    spec("sunsubscribe", -1, &["pubsub", "noscript", "loading", "stale"], (1, -1, 1), sunsubscribe),
    spec("publish", 3, &["pubsub", "loading", "stale", "fast", "may_replicate"], NO_KEYS, publish),
    spec("spublish", 3, &["pubsub", "loading", "stale", "fast", "may_replicate"], (1, 1, 1), spublish),
    spec("pubsub", -2, &["pubsub", "loading", "stale"], NO_KEYS, pubsub),
];

/// Commands a RESP2 client may send while subscribed.
pub(crate) fn allowed_when_subscribed(name: &str) -> bool {
    matches!(
        name,
        "subscribe"
            | "unsubscribe"
            | "psubscribe"
            | "punsubscribe"
            | "ssubscribe"
            | "sunsubscribe"
            | "ping"
            | "quit"
            | "reset"
    )
}

fn limits(s: &Session) -> Limits {
    Limits::from_config(s.state.config().get("client-output-buffer-limit").unwrap_or_default())
}

/// This connection's subscriber (created on its first subscription or MONITOR).
pub(crate) fn subscriber(s: &mut Session) -> Arc<Subscriber> {
    if let Some(sub) = &s.subscriber {
        return Arc::clone(sub);
    }
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let sub = Arc::new(Subscriber::new(tx, Arc::clone(&s.handle)));
    s.subscriber = Some(Arc::clone(&sub));
    s.messages = Some(rx);
    sub
}

fn confirmation(kind: &str, name: Option<Bytes>, count: usize) -> Reply {
    Reply::Push(vec![
        Reply::bulk(Bytes::copy_from_slice(kind.as_bytes())),
        name.map_or(Reply::Null, Reply::Bulk),
        Reply::Integer(count as i64),
    ])
}

fn subscribe_generic(s: &mut Session, args: &[Bytes], kind: Kind, label: &str) -> Reply {
    let sub = subscriber(s);
    let hub = Arc::clone(&s.state);
    let mut replies = Vec::new();
    for name in &args[1..] {
        if s.subscriptions(kind).insert(name.clone()) {
            hub.pubsub.subscribe(kind, name, s.id, &sub);
        }
        let count = if kind == Kind::Shard { s.subscriptions(kind).len() } else { s.subscription_count() };
        replies.push(confirmation(label, Some(name.clone()), count));
    }
    s.handle.set_kind(crate::services::clients::Kind::PubSub);
    Reply::Many(replies)
}

fn unsubscribe_generic(s: &mut Session, args: &[Bytes], kind: Kind, label: &str) -> Reply {
    let names: Vec<Bytes> = if args.len() > 1 {
        args[1..].to_vec()
    } else {
        let mut all: Vec<Bytes> = s.subscriptions(kind).iter().cloned().collect();
        all.sort();
        all
    };
    if names.is_empty() {
        let count = if kind == Kind::Shard { 0 } else { s.subscription_count() };
        return confirmation(label, None, count);
    }
    let mut replies = Vec::new();
    for name in names {
        if s.subscriptions(kind).remove(&name) {
            s.state.pubsub.unsubscribe(kind, &name, s.id);
        }
        let count = if kind == Kind::Shard { s.subscriptions(kind).len() } else { s.subscription_count() };
        replies.push(confirmation(label, Some(name), count));
    }
    if !s.subscribed() {
        s.handle.set_kind(crate::services::clients::Kind::Normal);
    }
    Reply::Many(replies)
}

fn subscribe(s: &mut Session, args: &[Bytes]) -> Reply {
    subscribe_generic(s, args, Kind::Channel, "subscribe")
}

fn unsubscribe(s: &mut Session, args: &[Bytes]) -> Reply {
    unsubscribe_generic(s, args, Kind::Channel, "unsubscribe")
}

fn psubscribe(s: &mut Session, args: &[Bytes]) -> Reply {
    subscribe_generic(s, args, Kind::Pattern, "psubscribe")
}

fn punsubscribe(s: &mut Session, args: &[Bytes]) -> Reply {
    unsubscribe_generic(s, args, Kind::Pattern, "punsubscribe")
}

fn ssubscribe(s: &mut Session, args: &[Bytes]) -> Reply {
    subscribe_generic(s, args, Kind::Shard, "ssubscribe")
}

fn sunsubscribe(s: &mut Session, args: &[Bytes]) -> Reply {
    unsubscribe_generic(s, args, Kind::Shard, "sunsubscribe")
}

/// Delivers to this node's subscribers and, as in Redis, to its replicas' subscribers.
fn publish(s: &mut Session, args: &[Bytes]) -> Reply {
    s.state.replication.propagate_publish(&args[1], &args[2]);
    Reply::Integer(s.state.pubsub.publish(Kind::Channel, &args[1], &args[2], limits(s)) as i64)
}

fn spublish(s: &mut Session, args: &[Bytes]) -> Reply {
    Reply::Integer(s.state.pubsub.publish(Kind::Shard, &args[1], &args[2], limits(s)) as i64)
}

fn pubsub(s: &mut Session, args: &[Bytes]) -> Reply {
    let sub = String::from_utf8_lossy(&args[1]).to_ascii_lowercase();
    let hub = &s.state.pubsub;
    match (sub.as_str(), args.len()) {
        ("channels", 2 | 3) => Reply::Array(
            hub.channels(Kind::Channel, args.get(2).map(|p| &p[..])).into_iter().map(Reply::Bulk).collect(),
        ),
        ("shardchannels", 2 | 3) => {
            Reply::Array(hub.channels(Kind::Shard, args.get(2).map(|p| &p[..])).into_iter().map(Reply::Bulk).collect())
        }
        ("numsub", _) | ("shardnumsub", _) => {
            let kind = if sub == "numsub" { Kind::Channel } else { Kind::Shard };
            let mut out = Vec::new();
            for c in &args[2..] {
                out.push(Reply::Bulk(c.clone()));
                out.push(Reply::Integer(hub.count(kind, c) as i64));
            }
            Reply::Array(out)
        }
        ("numpat", 2) => Reply::Integer(hub.pattern_count() as i64),
        ("channels" | "shardchannels" | "numpat", _) => {
            Reply::error(format!("ERR wrong number of arguments for 'pubsub|{sub}' command"))
        }
        ("help", 2) => super::introspection::help(&[
            "PUBSUB <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            "CHANNELS [<pattern>]",
            "    Return the currently active channels matching a <pattern> (default: '*').",
            "NUMPAT",
            "    Return number of subscriptions to patterns.",
            "NUMSUB [<channel> ...]",
            "    Return the number of subscribers for the specified channels, excluding",
            "    pattern subscriptions(default: no channels).",
            "SHARDCHANNELS [<pattern>]",
            "    Return the currently active shard level channels matching a <pattern> (default: '*').",
            "SHARDNUMSUB [<shardchannel> ...]",
            "    Return the number of subscribers for the specified shard level channel(s)",
            "HELP",
            "    Prints this help.",
        ]),
        _ => Reply::error(format!("ERR unknown subcommand '{}'. Try PUBSUB HELP.", String::from_utf8_lossy(&args[1]))),
    }
}
