"""SQL translation shared by the SQL sinks (sqlite, mysql): dialects, row statements and DDL."""
