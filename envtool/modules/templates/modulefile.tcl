#%Module1.0
## ${full_name}: written by envtool ${envtool_version} (Environment Modules / Tcl modulefile).
## Every change below is static and reversible: `module unload ${name}` restores the shell.
${notes}
${whatis}

proc ModulesHelp { } {
${help}
}

# Lmod 8.6 translates Tcl pushenv wrongly (envtool/modules/tcl.py): under Lmod, setenv is used.
set envtool_lmod [expr {[info exists ::ModuleTool] && $$::ModuleTool eq "Lmod"}]

${family}
${conflicts}
${depends_on}
${changes}
${extensions}
