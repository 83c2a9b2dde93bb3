-- Generated from crawler/items.py by scrapy_frontier.storage.schema_sql(); the storage pipeline runs the same DDL at start.
CREATE TABLE IF NOT EXISTS `pages` (
  `id` BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  `url` VARCHAR(2048) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  `final_url` VARCHAR(2048) CHARACTER SET ascii COLLATE ascii_bin NULL,
  `status` BIGINT NOT NULL,
  `title` VARCHAR(1024) NULL,
  `description` VARCHAR(2048) NULL,
  `language` VARCHAR(64) NULL,
  `headings` MEDIUMTEXT NULL,
  `text` MEDIUMTEXT NULL,
  `links` MEDIUMTEXT NULL,
  `content_hash` VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  `fetched_at` DATETIME(6) NOT NULL,
  `depth` BIGINT NULL,
  `latency_ms` BIGINT NULL,
  `updated_at` TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6),
  PRIMARY KEY (`id`),
  UNIQUE KEY `uq_pages_url` (`url`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;
