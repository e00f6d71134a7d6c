//! How each backend's driver reads a row's cells and binds a cell (behind the backend's
//! feature): the row description is read and written through these.

use crate::StoreError;
#[cfg(feature = "sqlite")]
use crate::row::Cell;
use crate::row::Cells;

#[cfg(feature = "sqlite")]
impl Cells for rusqlite::Row<'_> {
    fn text(&self, index: usize) -> Result<Option<&str>, StoreError> {
        Ok(self.get_ref(index)?.as_str_or_null().map_err(rusqlite::Error::from)?)
    }

    fn int(&self, index: usize) -> Result<Option<i64>, StoreError> {
        Ok(self.get_ref(index)?.as_i64_or_null().map_err(rusqlite::Error::from)?)
    }
}

#[cfg(feature = "sqlite")]
impl rusqlite::ToSql for Cell<'_> {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        match self {
            Cell::Text(text) => text.to_sql(),
            Cell::Int(int) => int.to_sql(),
            Cell::Joins(joins) => joins.to_sql(),
        }
    }
}

#[cfg(feature = "postgres")]
impl Cells for tokio_postgres::Row {
    fn text(&self, index: usize) -> Result<Option<&str>, StoreError> {
        Ok(self.try_get(index)?)
    }

    fn int(&self, index: usize) -> Result<Option<i64>, StoreError> {
        // Each column has its own width; the row decodes only the exact one.
        let ty = self.columns()[index].type_();
        Ok(if *ty == tokio_postgres::types::Type::INT2 {
            self.try_get::<_, Option<i16>>(index)?.map(i64::from)
        } else if *ty == tokio_postgres::types::Type::INT4 {
            self.try_get::<_, Option<i32>>(index)?.map(i64::from)
        } else {
            self.try_get(index)?
        })
    }
}
