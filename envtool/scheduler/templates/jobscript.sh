#!${shell}
${directives}
# Job script written by envtool ${version} for site ${site} (${site_file}), scheduler ${scheduler}.
# Layout: ${nodes} node(s) x ${ranks_per_node} rank(s) per node, ${gpus_per_rank} GPU(s) and ${cpus_per_rank} CPU(s) per rank (source: ${layout_source}).
# Every value is quoted for the shell: the command's words reach the ranks exactly as given.
set -e
${body}
