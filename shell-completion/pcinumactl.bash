# bash completion for pcinumactl(8)                        -*- shell-script -*-
#
# The commands and each command's options are read from pcinumactl's own
# --help, so a new command or option completes without editing this file;
# only the values of known options are listed here.

_pcinumactl_commands()
{
    pcinumactl --help 2>/dev/null |
        sed -n '/^Commands:/,/^$/s/^  \([a-z][a-z-]*\).*/\1/p' | sort -u
}

_pcinumactl()
{
    local cur prev words cword
    _init_completion || return

    local cmd="" i
    for ((i = 1; i < cword; i++)); do
        case ${words[i]} in
            -*) ;;
            *) cmd=${words[i]}; break ;;
        esac
    done

    if [[ -z $cmd ]]; then
        if [[ $cur == -* ]]; then
            COMPREPLY=($(compgen -W '--help --version' -- "$cur"))
        else
            COMPREPLY=($(compgen -W "$(_pcinumactl_commands)" -- "$cur"))
        fi
        return
    fi

    case $prev in
        --sysfs-root)
            _filedir -d
            return ;;
        --policy-file)
            _filedir json
            return ;;
        --policy)
            COMPREPLY=($(compgen -W 'off legacy preferred socket require required' -- "$cur"))
            return ;;
        --format)
            if [[ $cmd == host ]]; then
                COMPREPLY=($(compgen -W 'text json hwloc' -- "$cur"))
            else
                COMPREPLY=($(compgen -W 'xml explain json hwloc' -- "$cur"))
            fi
            return ;;
        --socket)
            _filedir
            return ;;
        --connect | -c)
            COMPREPLY=($(compgen -W 'qemu:///system qemu:///session' -- "$cur"))
            return ;;
        --domain)
            local uri="" j
            for ((j = 1; j < cword; j++)); do
                [[ ${words[j]} == --connect || ${words[j]} == -c ]] && uri=${words[j + 1]}
            done
            COMPREPLY=($(compgen -W "$(virsh ${uri:+-c "$uri"} list --all --name 2>/dev/null)" -- "$cur"))
            return ;;
    esac

    if [[ $cur == -* ]]; then
        local opts
        opts=$(pcinumactl "$cmd" --help 2>/dev/null | grep -o -- '--[a-z][a-z-]*' | sort -u)
        COMPREPLY=($(compgen -W "$opts" -- "$cur"))
        return
    fi

    case $cmd in
        plan | revert | define | topo | nccl-topo)
            _filedir xml ;;
        check-policy)
            _filedir json ;;
    esac
} &&
    complete -F _pcinumactl pcinumactl

# ex: filetype=sh
