create schema if not exists pgmq;
