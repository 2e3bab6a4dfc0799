#%Module1.0
## ${full_name}: written by envtool ${envtool_version} (Environment Modules / Tcl modulefile).
## Every change below is static and reversible: `module unload ${name}` restores the shell.
${notes}
${whatis}

proc ModulesHelp { } {
${help}
}

${warning}

# pushenv VAR VALUE, also under Lmod 8.6, whose Tcl pushenv sets VAR in its own process first
# and then records the new value as the one to restore: put the process environment back
# before Lmod reads it (envtool/modules/tcl.py).
proc envtool_pushenv {var val} {
    if {[info exists ::ModuleTool] && $$::ModuleTool eq "Lmod"} {
        set had [info exists ::env($$var)]
        if {$$had} {set old $$::env($$var)}
        pushenv $$var $$val
        if {$$had} {set ::env($$var) $$old} else {set ::env($$var) ""; unset ::env($$var)}
    } else {
        pushenv $$var $$val
    }
}

${family}
${conflicts}
${depends_on}
${changes}
${extensions}
