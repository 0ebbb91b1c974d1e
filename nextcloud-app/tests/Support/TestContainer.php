<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Tests\Support;

use Psr\Container\ContainerInterface;
use Psr\Container\NotFoundExceptionInterface;

/** A PSR-11 container holding the services a test puts in (e.g. Talk's internal classes). */
final class TestContainer implements ContainerInterface {
	/** @param array<string, object> $services */
	public function __construct(
		public array $services = [],
	) {
	}

	public function get($id) {
		if (!isset($this->services[$id])) {
			throw new class('no service ' . $id) extends \RuntimeException implements NotFoundExceptionInterface {
			};
		}
		return $this->services[$id];
	}

	public function has($id): bool {
		return isset($this->services[$id]);
	}
}
