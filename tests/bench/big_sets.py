#!/usr/bin/env python3
"""RSS of a sluice while four clients are part-way through 500 MB SETs, and
after they finish (issue 11). Usage: big_sets.py PORT SLUICE_PID
PORT is a resp listener of the sluice whose pid is SLUICE_PID; its upstream
must accept 2 GB of values. Prints base, at 90%% of each SET, peak, after."""
import socket, sys, time, threading, subprocess
port=int(sys.argv[1]); pid=int(sys.argv[2]); N=500*1000*1000
def rss():
    for l in open('/proc/%d/status'%pid):
        if l.startswith('VmRSS'): return int(l.split()[1])
peak=[rss()]; base=peak[0]; stop=[False]
def watch():
    while not stop[0]:
        peak[0]=max(peak[0],rss()); time.sleep(0.02)
t=threading.Thread(target=watch); t.start()
ss=[]
for i in range(4):
    s=socket.create_connection(('127.0.0.1',port)); s.sendall(b"*3\r\n$3\r\nSET\r\n$4\r\nbig%d\r\n$%d\r\n"%(i,N)); ss.append(s)
ch=b"v"*(1<<20); sent=[0]*4
while min(sent)<N*9//10:
    for i,s in enumerate(ss):
        s.sendall(ch); sent[i]+=len(ch)
mid=rss()
for i,s in enumerate(ss):
    while sent[i]<N:
        k=min(len(ch),N-sent[i]); s.sendall(ch[:k]); sent[i]+=k
    s.sendall(b"\r\n"); r=s.recv(100); assert r==b"+OK\r\n", r
    s.close()
time.sleep(0.5)
stop[0]=True; t.join()
after=rss()
print("base %d KiB, at 90%% of each SET %d KiB, peak %d KiB, after close %d KiB"%(base,mid,peak[0],after))
