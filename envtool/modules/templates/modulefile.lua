-- -*- lua -*-
-- ${full_name}: written by envtool ${envtool_version} (Lmod modulefile).
-- Every change below is static and reversible: `module unload ${name}` restores the shell.
${notes}
${whatis}

help(${help})
${warning}

${family}
${conflicts}
${depends_on}
${changes}
${extensions}
