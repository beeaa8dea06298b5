# Sourced by the bench/*_veth.sh scripts: netns_pair NA NB A B makes two network namespaces NA
# and NB (two "hosts") joined by a veth pair, with addresses A and B (/24) and loopback up.
# The caller deletes them (ip netns del; the veth pair goes with them).
netns_pair() {
    ip netns add "$1"; ip netns add "$2"
    ip link add "v$1" type veth peer name "v$2"
    ip link set "v$1" netns "$1"; ip link set "v$2" netns "$2"
    ip -n "$1" addr add "$3/24" dev "v$1"; ip -n "$2" addr add "$4/24" dev "v$2"
    for n in "$1" "$2"; do ip -n "$n" link set lo up; done
    ip -n "$1" link set "v$1" up; ip -n "$2" link set "v$2" up
}

# netns_rsh FILE A NA B NB writes mpirun's "rsh agent" (--mca plm_rsh_agent FILE): it runs the
# command in the namespace of the host address it is asked for, A in NA and B in NB.
netns_rsh() {
    printf '#!/bin/sh\nhost=$1; shift\ncase $host in %s) ns=%s;; %s) ns=%s;; *) exit 1;; esac\nexec ip netns exec $ns sh -c "$*"\n' \
        "$2" "$3" "$4" "$5" > "$1"
    chmod +x "$1"
}
