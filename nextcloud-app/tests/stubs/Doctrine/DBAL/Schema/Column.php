<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 *
 * Test stub: the part of Doctrine DBAL 3 Schema\Table/Column that migrations call. It only
 * records the definition; tests turn it into SQLite DDL (Tests\Support\SqliteSchema).
 */

namespace Doctrine\DBAL\Schema;

class Column {
	/** @param array<string, mixed> $options */
	public function __construct(
		private string $name,
		private string $typeName,
		private array $options = [],
	) {
	}

	public function getName(): string {
		return $this->name;
	}

	/** The real method returns a Doctrine Type object; the stub keeps the type's name. */
	public function getTypeName(): string {
		return $this->typeName;
	}

	public function getNotnull(): bool {
		return (bool)($this->options['notnull'] ?? true);
	}

	public function getAutoincrement(): bool {
		return (bool)($this->options['autoincrement'] ?? false);
	}

	public function getDefault(): mixed {
		return $this->options['default'] ?? null;
	}

	public function getLength(): ?int {
		return isset($this->options['length']) ? (int)$this->options['length'] : null;
	}
}
