<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 *
 * Test stub: hand-written minimal signature of Nextcloud Talk (spreed) 21, only what the app uses.
 */

namespace OCA\Talk\Events;

use OCP\EventDispatcher\Event;

class BotInstallEvent extends Event {
	/**
	 * @param ?int $features null means "event" for nextcloudapp:// URLs (Talk 21+)
	 */
	public function __construct(
		protected string $name,
		protected string $secret,
		protected string $url,
		protected string $description = '',
		protected ?int $features = null,
	) {
		parent::__construct();
	}

	public function getName(): string {
		return $this->name;
	}

	public function getSecret(): string {
		return $this->secret;
	}

	public function getUrl(): string {
		return $this->url;
	}

	public function getDescription(): string {
		return $this->description;
	}

	public function getFeatures(): ?int {
		return $this->features;
	}
}
