# usage: t.sh N cmd...  -> median wall ms
n=$1; shift
for i in $(seq $n); do s=$(date +%s%N); "$@" >/dev/null 2>&1; e=$(date +%s%N); echo $(( (e-s)/1000000 )); done | sort -n | awk '{a[NR]=$1} END {print "median", a[int((NR+1)/2)], "min", a[1]}'
