<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Tests\Support;

use Doctrine\DBAL\Schema\Table;
use OCP\DB\ISchemaWrapper;
use OCP\DB\Types;
use OCP\Migration\IMigrationStep;
use OCP\Migration\IOutput;

/**
 * SqliteSchema runs an app migration step against SqliteConnection: it hands the step an
 * ISchemaWrapper, checks the new tables against the portability rules Nextcloud enforces
 * for app migrations (MigrationService::ensureOracleConstraints: name lengths, a primary
 * key, no NOT NULL booleans, no NOT NULL '' defaults) and creates them.
 */
final class SqliteSchema implements ISchemaWrapper {
	/** @var array<string, Table> */
	private array $created = [];

	public function __construct(
		private readonly SqliteConnection $db,
	) {
	}

	/** Runs $step's changeSchema() and applies what it returns; returns the created table names. */
	public static function migrate(SqliteConnection $db, IMigrationStep $step, IOutput $output): array {
		$schema = new self($db);
		$result = $step->changeSchema($output, static fn () => $schema, []);
		if ($result === null) {
			return [];
		}
		return $schema->apply();
	}

	public function getTable($tableName) {
		if (isset($this->created[$tableName])) {
			return $this->created[$tableName];
		}
		throw new \LogicException('the stub only knows tables created in this migration');
	}

	public function hasTable($tableName) {
		return isset($this->created[$tableName]) || $this->db->tableExists($tableName);
	}

	public function createTable($tableName) {
		if ($this->hasTable($tableName)) {
			throw new \LogicException('table ' . $tableName . ' exists');
		}
		return $this->created[$tableName] = new Table($tableName);
	}

	/** @return list<string> */
	private function apply(): array {
		foreach ($this->created as $name => $table) {
			$this->check($table);
			$this->db->pdo()->exec($this->ddl($table));
		}
		return array_keys($this->created);
	}

	private function check(Table $table): void {
		if (strlen($table->getName()) > 27) {
			throw new \LogicException('table name too long: ' . $table->getName());
		}
		if ($table->getPrimaryKeyColumnNames() === []) {
			throw new \LogicException('table without primary key: ' . $table->getName());
		}
		foreach ($table->getColumns() as $column) {
			if (strlen($column->getName()) > 30) {
				throw new \LogicException('column name too long: ' . $column->getName());
			}
			if ($column->getTypeName() === Types::BOOLEAN && $column->getNotnull()) {
				throw new \LogicException('boolean column must be nullable: ' . $column->getName());
			}
			if ($column->getTypeName() === Types::STRING && $column->getNotnull() && $column->getDefault() === '') {
				throw new \LogicException('NOT NULL string column with an empty default: ' . $column->getName());
			}
			if ($column->getTypeName() === Types::STRING && (int)$column->getLength() > 4000) {
				throw new \LogicException('string column longer than 4000: ' . $column->getName());
			}
		}
		foreach (array_keys($table->getIndexDefinitions()) as $index) {
			if (strlen($index) > 30) {
				throw new \LogicException('index name too long: ' . $index);
			}
		}
	}

	private function ddl(Table $table): string {
		$lines = [];
		$inlinePk = false;
		foreach ($table->getColumns() as $column) {
			$name = SqliteQueryBuilder::quote($column->getName());
			if ($column->getAutoincrement()) {
				// How Doctrine's SQLite platform renders an autoincrement primary key.
				$lines[] = $name . ' INTEGER PRIMARY KEY AUTOINCREMENT NOT NULL';
				$inlinePk = true;
				continue;
			}
			$type = match ($column->getTypeName()) {
				Types::BIGINT => 'BIGINT',
				Types::INTEGER => 'INTEGER',
				Types::SMALLINT => 'SMALLINT',
				Types::BOOLEAN => 'BOOLEAN',
				Types::STRING => 'VARCHAR(' . ($column->getLength() ?? 255) . ')',
				Types::TEXT => 'CLOB',
				default => throw new \LogicException('type not in the stub: ' . $column->getTypeName()),
			};
			$line = $name . ' ' . $type . ($column->getNotnull() ? ' NOT NULL' : '');
			if ($column->getDefault() !== null) {
				$default = $column->getDefault();
				$line .= ' DEFAULT ' . (is_int($default) ? (string)$default : $this->db->pdo()->quote((string)$default));
			}
			$lines[] = $line;
		}
		if (!$inlinePk) {
			$lines[] = 'PRIMARY KEY (' . implode(', ', array_map([SqliteQueryBuilder::class, 'quote'], $table->getPrimaryKeyColumnNames())) . ')';
		}
		return 'CREATE TABLE ' . SqliteQueryBuilder::quote($this->db->prefixed($table->getName())) . ' (' . implode(', ', $lines) . ')';
	}
}
