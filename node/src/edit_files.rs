//! The commands that edit files rather than ask a node: `termesh cluster
//! ...` (a cluster's folder of configs and certificates) and `termesh
//! token ...` (the tokens of config files).

use std::path::PathBuf;

use crate::args::{ClusterCommand, TokenCommand};

/// `termesh cluster init | add-node | remove-node | rotate-ca`.
pub(crate) fn cluster(command: ClusterCommand) -> anyhow::Result<i32> {
    match command {
        ClusterCommand::Init {
            out,
            nodes,
            force,
            http_tls,
            nodes_data_dir,
        } => {
            let options = termesh_node::cluster::init::InitOptions {
                force,
                http_tls,
                data_dir: nodes_data_dir,
            };
            let written = termesh_node::cluster::init::init(&out, &nodes, &options)?;
            println!(
                "cluster `{}`: {} nodes written to {}",
                written.id,
                written.configs.len(),
                out.display()
            );
            for path in &written.configs {
                println!("  termesh node --config {}", path.display());
            }
            println!(
                "admin token (also in {}): {}",
                out.join("admin.token").display(),
                written.token
            );
            Ok(0)
        }
        ClusterCommand::AddNode { dir, node } => {
            let changed = termesh_node::cluster::members::add_node(&dir, &node)?;
            println!(
                "node `{}` written to {}",
                node.name,
                changed.node.parent().unwrap_or(&dir).display()
            );
            print_edited(&changed.edited);
            println!(
                "then copy {} to the new node's machine and start it: termesh node --config {}",
                changed.node.parent().unwrap_or(&dir).display(),
                changed.node.display()
            );
            Ok(0)
        }
        ClusterCommand::RemoveNode { dir, name } => {
            let changed = termesh_node::cluster::members::remove_node(&dir, &name)?;
            println!(
                "node `{name}` removed; its folder {} is marked REMOVED (delete it once the node is stopped)",
                changed.node.display()
            );
            print_edited(&changed.edited);
            println!("then stop node `{name}`");
            Ok(0)
        }
        ClusterCommand::RotateCa { dir, finish } => {
            let written = if finish {
                termesh_node::cluster::rotate::finish(&dir)?
            } else {
                termesh_node::cluster::rotate::rotate(&dir)?
            };
            if finish {
                println!("the old CA is dropped: ca.pem holds the new CA only");
            } else {
                println!("a new CA is issued (the old one is in ca.old.pem until --finish); every node has a new certificate and trusts both CAs");
            }
            print_edited(&written);
            if !finish {
                println!(
                    "once every node has reloaded: termesh cluster rotate-ca --dir {} --finish",
                    dir.display()
                );
            }
            Ok(0)
        }
    }
}

fn print_edited(edited: &[PathBuf]) {
    println!(
        "edited (copy each node's folder to it, then `termesh config reload` there, or SIGHUP):"
    );
    for path in edited {
        println!("  {}", path.display());
    }
}

/// `termesh token add | revoke | list`.
pub(crate) fn token(command: TokenCommand) -> anyhow::Result<i32> {
    use termesh_node::token_file;
    match command {
        TokenCommand::Add { role, name, config } if config.is_empty() => {
            let token = termesh_node::token::generate();
            println!("token: {token}");
            println!("\n# add to the node's config file:\n[[auth.tokens]]");
            println!("name = {name:?}");
            println!(
                "hash = \"{}\"\nrole = \"{role}\"",
                termesh_config::hash_token(&token)
            );
        }
        TokenCommand::Add { role, name, config } => {
            let token = token_file::add(&config, &role, &name)?;
            println!("token: {token}");
            eprintln!(
                "added {name:?} ({role}) to {}; shown once, only its hash is kept. \
                 Apply it with `termesh config reload` (or SIGHUP to the node).",
                files(&config)
            );
        }
        TokenCommand::Revoke { name, config } => {
            let n = token_file::revoke(&config, &name)?;
            eprintln!(
                "revoked {name:?} ({n} entr{}) in {}; apply it with `termesh config reload`",
                if n == 1 { "y" } else { "ies" },
                files(&config)
            );
        }
        TokenCommand::List { config } => {
            for (name, role) in token_file::list(&config)? {
                println!("{name:<24} {role}");
            }
        }
    }
    Ok(0)
}

fn files(paths: &[PathBuf]) -> String {
    let names: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    names.join(", ")
}
